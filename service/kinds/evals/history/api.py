"""The history's endpoints of the HTTP API (registered with the evaluation kind's, service.kinds.evals.api):

    GET /api/tunings/{tuning}/versions                   every version and rejected candidate
    GET /api/tunings/{tuning}/versions/{version}/why     the feedback, analysis and gate evidence behind one
    GET /api/tunings/{tuning}/diff/{a}/{b}               the changes from version a to version b
    POST /api/tunings/{tuning}/candidates/{candidate}/approve   publish a waiting candidate (bearer token)
    POST /api/tunings/{tuning}/candidates/{candidate}/reject    reject it (bearer token)

A version is named as on the command line (initial, main, or hex digits of one of the tuning's versions or
candidates) and resolved against the tuning's own before git sees it: anything else is a 404 saying what
is expected (service.kinds.evals.history.names).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from service.api.http import Endpoint, Guard, HttpError, found, json_response, read_model_body, slug_param
from service.client.client import TunefleetClient
from service.core.errors import UnknownTuningError
from service.kinds.evals.approval import Decision, NotWaitingError, Verdict
from service.kinds.evals.history.models import VersionDiff, VersionList, VersionWhy
from service.kinds.evals.history.names import UnknownVersionError

VERSIONS = "/api/tunings/{tuning}/versions"
CANDIDATE = "/api/tunings/{tuning}/candidates/{candidate}"
UNKNOWN = (UnknownTuningError, UnknownVersionError)
"""What a 404 answers: a tuning or a version the store does not hold."""
DECISIONS: tuple[tuple[str, Verdict], ...] = (("approve", "approved"), ("reject", "rejected"))
NAME_MAX_CHARS = 64


def _name(request: Request, field: str) -> str:
    value = str(request.path_params[field])
    if len(value) > NAME_MAX_CHARS:
        raise HttpError(422, f"{field}: a version name of at most {NAME_MAX_CHARS} characters is expected")
    return value


class DecisionBody(BaseModel):
    """What an approval or a rejection takes (an empty body is no note)."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(default="", max_length=2000, description="Why, kept with the decision.")


class HistoryApi:
    """The history handlers, bound to the API's fleet client and access guard."""

    def __init__(self, client: TunefleetClient, guard: Guard) -> None:
        self._client = client
        self._guard = guard

    def endpoints(self) -> list[Endpoint]:
        read = (401, 404, 422, 503)
        return [
            Endpoint("GET", VERSIONS, self.versions, "A tuning's versions", VersionList, read),
            Endpoint("GET", VERSIONS + "/{version}/why", self.why, "Why a version", VersionWhy, read),
            Endpoint("GET", "/api/tunings/{tuning}/diff/{a}/{b}", self.diff, "A diff", VersionDiff, read),
            *(
                Endpoint(
                    "POST",
                    CANDIDATE + "/" + action,
                    self.decider(verdict),
                    f"{action.capitalize()} a waiting candidate",
                    Decision,
                    (401, 404, 409, 413, 422, 503),
                    body=DecisionBody,
                    access="write",
                )
                for action, verdict in DECISIONS
            ),
        ]

    def decider(self, verdict: Verdict) -> Callable[[Request], Awaitable[Response]]:
        async def decide(request: Request) -> Response:
            self._guard.write(request)
            tuning, candidate = slug_param(request, "tuning"), _name(request, "candidate")
            body = await read_model_body(request, DecisionBody, "a decision", "invalid decision", empty=b"{}")
            decided = self._client.versions.decide(tuning, candidate, verdict, "api", body.note)
            try:
                return json_response(await found(decided, UNKNOWN))
            except NotWaitingError as exc:
                raise HttpError(409, str(exc)) from None

        return decide

    async def versions(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        return json_response(await found(self._client.versions.list(tuning), UnknownTuningError))

    async def why(self, request: Request) -> Response:
        tuning, version = slug_param(request, "tuning"), _name(request, "version")
        return json_response(await found(self._client.versions.why(tuning, version), UNKNOWN))

    async def diff(self, request: Request) -> Response:
        tuning, a, b = slug_param(request, "tuning"), _name(request, "a"), _name(request, "b")
        return json_response(await found(self._client.versions.diff(tuning, a, b), UNKNOWN))


def endpoints(client: TunefleetClient, guard: Guard) -> list[Endpoint]:
    return HistoryApi(client, guard).endpoints()
