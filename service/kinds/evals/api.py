"""The evaluation endpoints of the HTTP API (service.api.app registers them with the others):

    POST /api/tunings/{tuning}/evals      evaluate a version (an EvalRequest; bearer token)
    GET  /api/evals                       every evaluation with its live progress
    GET  /api/evals/{eval}                one evaluation's results (pass rate, rubric, cases, costs)
    GET  /api/evals/{a}/compare/{b}       evaluation b against a: flips, paired test, difference
    POST /api/evals/{eval}/cancel         cancel its unfinished items (bearer token)
    GET  /api/tunings/{tuning}/report     the tuning's REPORT.md, as text/markdown
    GET  /api/tunings/{tuning}/report.json  the same as JSON
    GET  /api/tunings/{tuning}/versions, .../diff/{a}/{b}, .../versions/{v}/why   the history
         (service.kinds.evals.history.api)

An evaluation asked over HTTP takes its cases from the tuning's split, never from a folder: a folder
would be one of the daemon's machine, which the token does not give access to (`--cases` is the CLI's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from service.api import http
from service.api.http import Endpoint, Guard, HttpError, json_response, off_loop, read_model_body, slug_param
from service.client.client import TunefleetClient
from service.kinds.evals.errors import EvalInputError, UnknownEvalError
from service.kinds.evals.history import api as history_api
from service.kinds.evals.models import (
    REPEATS_MAX,
    Comparison,
    EvalProgress,
    EvalResults,
    EvalSpec,
    VersionAsked,
)
from service.kinds.evals.report import REPORT_FILE, TuningReport, build_report, render_report

T = TypeVar("T")

EVALS = "/api/evals"
EVAL = EVALS + "/{eval}"
REPORT = "/api/tunings/{tuning}/report"


class EvalRequest(BaseModel):
    """What `POST /api/tunings/{tuning}/evals` takes: `tunefleet eval TUNING` without `--cases`."""

    model_config = ConfigDict(extra="forbid")

    version: VersionAsked = Field(
        default="main", description="main, initial or a commit id (4 to 40 hex digits)."
    )
    split: Literal["holdout", "train", "all"] | None = Field(
        default=None, description="The part of the split (default: holdout when there is one, else all)."
    )
    repeats: int = Field(
        default=1, ge=1, le=REPEATS_MAX, description=f"Runs of each case (1 to {REPEATS_MAX})."
    )
    name: str | None = Field(default=None, description="The evaluation's id (a slug).")


class EvalList(BaseModel):
    evals: list[EvalProgress]


class EvalCancelled(BaseModel):
    id: str
    cancelled: int = Field(description="Items cancelled now (running ones end within a poll).")


class EvalApi(http.KindRoutes):
    """The evaluation handlers."""

    def endpoints(self) -> list[Endpoint]:
        E = Endpoint  # noqa: N806 (a table reads better with a short name)
        read = (401, 404, 422, 503)
        write = (401, 404, 413, 422, 503)
        return [
            E("GET", EVALS, self.list_evals, "Every evaluation's progress", EvalList, (401, 503)),
            E("GET", EVAL, self.results, "An evaluation's results", EvalResults, read),
            E("GET", EVAL + "/compare/{other}", self.compare, "Evaluation b against a", Comparison, read),
            E("GET", REPORT, self.report, "The tuning's REPORT.md", "text/markdown", read),
            E("GET", REPORT + ".json", self.report_json, "The tuning's report as JSON", TuningReport, read),
            E(
                "POST",
                "/api/tunings/{tuning}/evals",
                self.create,
                "Evaluate a version",
                EvalSpec,
                write,
                body=EvalRequest,
            ),
            E("POST", EVAL + "/cancel", self.cancel, "Cancel an evaluation", EvalCancelled, write),
        ]

    async def _read(self, read: Callable[[], T], *eval_ids: str) -> T:
        """A read of the store (off the event loop); 404 for an evaluation the store does not hold,
        naming the evaluation and not the store's folder (which is the daemon's machine's business)."""
        named = " or ".join(repr(eval_id) for eval_id in eval_ids) or "of that name"
        return await off_loop(read, UnknownEvalError, f"no evaluation {named} in the store")

    async def list_evals(self, request: Request) -> Response:
        return json_response(EvalList(evals=await self._client.evals.progress()))

    async def results(self, request: Request) -> Response:
        eval_id = slug_param(request, "eval")
        return json_response(await self._read(lambda: self._client.evals.results(eval_id), eval_id))

    async def compare(self, request: Request) -> Response:
        before, after = slug_param(request, "eval"), slug_param(request, "other")
        evals = self._client.evals
        return json_response(await self._read(lambda: evals.compare(before, after), before, after))

    def _report(self, tuning: str) -> TuningReport:
        return build_report(self._client.tuning_store(tuning), self._client.evals.folder)

    async def report(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        written = self._client.tuning_store(tuning).root / REPORT_FILE

        def read() -> str:
            return written.read_text() if written.exists() else render_report(self._report(tuning))

        return Response(await self._read(read), media_type="text/markdown; charset=utf-8")

    async def report_json(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        return json_response(await self._read(lambda: self._report(tuning)))

    async def create(self, request: Request) -> Response:
        self._guard.write(request)
        tuning = slug_param(request, "tuning")
        asked = await read_model_body(
            request, EvalRequest, "an evaluation request", "invalid evaluation request", empty=b"{}"
        )
        try:
            spec = await self._client.evals.create(
                tuning, version=asked.version, split=asked.split, repeats=asked.repeats, name=asked.name
            )
        except EvalInputError as exc:
            raise HttpError(422, str(exc)) from None
        return json_response(spec, 201)

    async def cancel(self, request: Request) -> Response:
        self._guard.write(request)
        eval_id = slug_param(request, "eval")
        missing = f"no evaluation {eval_id!r} in the store"
        count = await http.found(self._client.evals.cancel(eval_id), UnknownEvalError, missing)
        return json_response(EvalCancelled(id=eval_id, cancelled=count))


def endpoints(client: TunefleetClient, guard: Guard) -> list[Endpoint]:
    """The evaluation kind's routes (service.core.kinds: the API takes them from every kind's `api`)."""
    return [*EvalApi(client, guard).endpoints(), *history_api.endpoints(client, guard)]
