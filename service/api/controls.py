"""The writing endpoints of the HTTP API: submit one case or a batch, pause, resume, cancel.

Each needs the write token (`api_token`) as a bearer token (service.api.http). A batch is all or
nothing: every item is validated first, and one invalid item refuses the whole batch with each
invalid item named by index; only then are the cases submitted, as `tunefleet submit` does.
"""

from __future__ import annotations

import json

import structlog
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from service.api.http import HttpError, field_errors, json_response, read_body, slug_param
from service.client.client import TunefleetClient
from service.core.io.documents import load_json
from service.core.models.api import (
    BatchItem,
    BatchRefused,
    BatchResult,
    Cancelled,
    FieldError,
    ItemErrors,
    PauseState,
    Released,
    SubmitResult,
)
from service.core.models.case import Case
from service.core.settings import FleetSettings

log = structlog.get_logger()

BATCH_MAX_CASES = 1000
BATCH_BODY_CASES = 16
"""A batch's body may be this many times `case_max_bytes` (each item is held to `case_max_bytes`)."""


class BatchError(HttpError):
    """A refused batch: 422 with every invalid item."""

    def __init__(self, items: list[ItemErrors]) -> None:
        super().__init__(422, f"{len(items)} invalid case(s): nothing submitted")
        self.refused = BatchRefused(error=str(self), items=items)


class Controls:
    """The writing handlers, bound to one open fleet client."""

    def __init__(self, client: TunefleetClient, settings: FleetSettings) -> None:
        self.client = client
        self.max_bytes = settings.case_max_bytes

    async def submit(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        self.client.tuning_store(tuning)
        body = await read_body(request, self.max_bytes, "a case body")
        try:
            case = Case.model_validate_json(body)
        except ValidationError as exc:
            raise HttpError(422, "invalid case", field_errors(exc)) from None
        enqueued = await self.client.submit(tuning, case)
        log.info("case_submitted", tuning=tuning, case=case.id, rev=case.rev, enqueued=enqueued, via="api")
        result = SubmitResult(tuning=tuning, case=case.id, rev=case.rev, enqueued=enqueued)
        return json_response(result, 201 if enqueued else 200)

    async def batch(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        self.client.tuning_store(tuning)
        body = await read_body(request, self.max_bytes * BATCH_BODY_CASES, "a batch body")
        cases = self.validate_batch(body)
        enqueued = await self.client.submit_many(tuning, cases)
        items = [
            BatchItem(index=i, case=c.id, rev=c.rev, enqueued=ok)
            for i, (c, ok) in enumerate(zip(cases, enqueued, strict=True))
        ]
        fresh = sum(enqueued)
        log.info("batch_submitted", tuning=tuning, cases=len(cases), enqueued=fresh, via="api")
        result = BatchResult(tuning=tuning, enqueued=fresh, already_known=len(cases) - fresh, cases=items)
        return json_response(result, 201 if fresh else 200)

    def validate_batch(self, body: bytes) -> list[Case]:
        """Every case of a batch, or a BatchError naming each invalid item (nothing is submitted)."""
        try:
            raw = load_json(body)  # nesting bounded (service.core.io.documents): never a RecursionError
        except ValueError as exc:
            raise HttpError(422, f"a batch must be a JSON array of cases: {exc}") from None
        if not isinstance(raw, list) or not raw:
            raise HttpError(422, "a batch must be a non-empty JSON array of cases")
        if len(raw) > BATCH_MAX_CASES:
            raise HttpError(413, f"a batch holds at most {BATCH_MAX_CASES} cases, not {len(raw)}")
        cases: list[Case] = []
        bad: list[ItemErrors] = []
        seen: dict[tuple[str, int], int] = {}
        for index, item in enumerate(raw):
            ident = item.get("id") if isinstance(item, dict) else None
            name = ident if isinstance(ident, str) else None
            size = len(json.dumps(item, separators=(",", ":")).encode())
            if size > self.max_bytes:
                too_big = f"{size} bytes; a case is at most {self.max_bytes} (case_max_bytes)"
                bad.append(
                    ItemErrors(index=index, case=name, fields=[FieldError(field="(item)", message=too_big)])
                )
                continue
            try:
                case = Case.model_validate(item)
            except ValidationError as exc:
                bad.append(ItemErrors(index=index, case=name, fields=field_errors(exc)))
                continue
            first = seen.setdefault((case.id, case.rev), index)
            if first != index:
                message = f"the same case and rev as item {first}"
                bad.append(
                    ItemErrors(index=index, case=name, fields=[FieldError(field="id", message=message)])
                )
            cases.append(case)
        if bad:
            raise BatchError(bad)
        return cases

    async def pause(self, request: Request) -> Response:
        await self.client.pause()
        log.info("fleet_paused", via="api")
        return json_response(PauseState(paused=True))

    async def resume(self, request: Request) -> Response:
        await self.client.resume()
        log.info("fleet_resumed", via="api")
        return json_response(PauseState(paused=False))

    async def resume_tuning(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        released = await self.client.resume(tuning)
        return json_response(Released(tuning=tuning, released=released))

    async def cancel_tuning(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        done = await self.client.cancel(tuning)
        log.info("tuning_cancelled", tuning=tuning, cases=len(done), via="api")
        return json_response(Cancelled(tuning=tuning, case=None, cancelled=done))

    async def cancel_case(self, request: Request) -> Response:
        tuning = slug_param(request, "tuning")
        case = slug_param(request, "case")
        if not self.client.tuning_store(tuning).revs(case):
            raise HttpError(404, f"tuning {tuning!r} has no case {case!r}")
        done = await self.client.cancel(tuning, case)
        log.info("case_cancelled_by_request", tuning=tuning, case=case, cancelled=bool(done), via="api")
        return json_response(Cancelled(tuning=tuning, case=case, cancelled=done))
