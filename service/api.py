"""The HTTP API and dashboard of a fleet: a Starlette app built by `create_app(client, settings)`.

Reads come from Redis (status, events) and the store (tunings, results, case detail); the only
write is a case submission, guarded by a bearer token. Every endpoint is declared once, in
`Api.endpoints`, which both routes it and describes it in the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from service import keys
from service.client import TunefleetClient
from service.errors import RedisUnavailableError, TunefleetError, UnknownTuningError
from service.health import daemon_checks
from service.metrics import FleetMetrics, fleet_snapshot
from service.models.api import (
    CaseRows,
    CasesQuery,
    ErrorBody,
    EventsPage,
    EventsQuery,
    FieldError,
    StatusView,
    StreamEvent,
    SubmitResult,
    TuningInfo,
    TuningList,
)
from service.models.case import SLUG_PATTERN, SLUG_RE, Case
from service.models.events import Event
from service.models.health import Liveness, Readiness
from service.models.status import CaseDetail
from service.queries import case_detail, results
from service.settings import FleetSettings

log = structlog.get_logger()

DASHBOARD = Path(__file__).parent / "dashboard"
MAX_BODY_BYTES = 1 << 20
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'"
REF = "#/components/schemas/{model}"
CASES = "/api/tunings/{tuning}/cases"
SUBMIT_ERRORS = (401, 404, 413, 422, 503)
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


class HttpError(Exception):
    """An error answer: its status code and body (and a challenge for 401)."""

    def __init__(self, status: int, error: str, fields: list[FieldError] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.body = ErrorBody(error=error, fields=fields or [])
        self.headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}


@dataclass(frozen=True)
class Endpoint:
    """One route and its OpenAPI description. `answer` is a model (JSON) or a media type."""

    method: str
    path: str
    handler: Handler
    summary: str
    answer: type[BaseModel] | str
    errors: tuple[int, ...] = ()
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None


def json_response(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def field_errors(exc: ValidationError) -> list[FieldError]:
    return [
        FieldError(field=".".join(str(p) for p in e["loc"]) or "(body)", message=e["msg"])
        for e in exc.errors()
    ]


def parse_query(model: type[M], params: Mapping[str, str]) -> M:
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise HttpError(422, "invalid query", field_errors(exc)) from None


def slug_param(request: Request, name: str) -> str:
    value = str(request.path_params[name])
    if not SLUG_RE.match(value):
        raise HttpError(422, f"invalid {name}", [FieldError(field=name, message="not a safe slug")])
    return value


class Api:
    """The handlers, bound to one open fleet client."""

    def __init__(self, client: TunefleetClient, settings: FleetSettings) -> None:
        self.client = client
        self.settings = settings
        self.metrics = FleetMetrics(client.redis, settings.queue)
        health = daemon_checks(client.redis, settings.store)
        E = Endpoint  # noqa: N806 (a table reads better with a short name)
        self.endpoints = [
            E("GET", "/api/status", self.status, "Fleet status and locks", StatusView, (503,)),
            E("GET", "/api/tunings", self.tunings, "Registered tunings", TuningList),
            E("GET", CASES, self.cases, "Result rows", CaseRows, (404, 422), CasesQuery),
            E("GET", CASES + "/{case}", self.case, "A case's tries", CaseDetail, (404, 422)),
            E("GET", "/api/events", self.events, "Stream events", EventsPage, (422, 503), EventsQuery),
            E("POST", CASES, self.submit, "Submit a case", SubmitResult, SUBMIT_ERRORS, body=Case),
            E("GET", "/healthz", health.healthz, "Alive (503 when not; no token)", Liveness),
            E("GET", "/readyz", health.readyz, "Ready (503 with the reasons; no token)", Readiness),
            E("GET", "/metrics", self.prometheus, "Prometheus metrics", "text/plain"),
            E("GET", "/openapi.json", self.openapi, "This document", "application/json"),
            E("GET", "/", self.dashboard, "The dashboard", "text/html"),
        ]
        from service.goal_api import GoalApi  # it builds on this module's helpers

        self.endpoints += GoalApi(self).endpoints()
        self.document = json.dumps(openapi_document(self.endpoints)).encode()

    async def status(self, request: Request) -> Response:
        return json_response(await fleet_snapshot(self.client.redis, self.settings.queue))

    async def tunings(self, request: Request) -> Response:
        def read() -> TuningList:
            infos = []
            for name in self.client.store.tuning_names():
                c = self.client.store.tuning(name).config()
                limits = {"tries": c.tries, "mem_tries": c.mem_tries, "max_voids": c.max_voids}
                kinds = {"runner": c.runner.kind, "analyzer": c.analyzer.kind, "applier": c.applier.kind}
                infos.append(TuningInfo(name=name, **limits, **kinds))
            return TuningList(tunings=infos)

        return json_response(await run_in_threadpool(read))

    async def cases(self, request: Request) -> Response:
        query = parse_query(CasesQuery, request.query_params)
        store = self.client.tuning_store(slug_param(request, "tuning"))
        rows = await run_in_threadpool(results, store)
        if query.state is not None:
            rows = [r for r in rows if r.state == query.state]
        return json_response(CaseRows(tuning=store.name, state=query.state, cases=rows))

    async def case(self, request: Request) -> Response:
        store = self.client.tuning_store(slug_param(request, "tuning"))
        case_id = slug_param(request, "case")
        detail = await run_in_threadpool(case_detail, store, case_id)
        if detail is None:
            raise HttpError(404, f"tuning {store.name!r} has no case {case_id!r}")
        return json_response(detail)

    async def events(self, request: Request) -> Response:
        query = parse_query(EventsQuery, request.query_params)
        redis = self.client.redis
        if query.after is None:
            raw = list(reversed(await redis.xrevrange(keys.events(), count=query.limit)))
        else:
            raw = await redis.xrange(keys.events(), min="(" + query.after, count=query.limit)
        page = []
        for entry_id, fields in raw:
            try:
                event = Event.model_validate_json(fields[b"event"])
            except (KeyError, ValidationError) as exc:
                log.warning("api_event_unreadable", id=entry_id.decode(), error=str(exc))
                continue
            page.append(StreamEvent(id=entry_id.decode(), event=event))
        last = raw[-1][0].decode() if raw else query.after
        return json_response(EventsPage(events=page, last_id=last))

    def authorize(self, request: Request) -> None:
        token = self.settings.api_token
        if token is None:
            raise HttpError(503, "case submission is disabled: the fleet has no api_token configured")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise HttpError(401, "a valid bearer token is required")

    async def submit(self, request: Request) -> Response:
        self.authorize(request)
        tuning = slug_param(request, "tuning")
        self.client.tuning_store(tuning)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise HttpError(413, f"a case body is at most {MAX_BODY_BYTES} bytes")
        try:
            case = Case.model_validate_json(bytes(body))
        except ValidationError as exc:
            raise HttpError(422, "invalid case", field_errors(exc)) from None
        enqueued = await self.client.submit(tuning, case)
        log.info("case_submitted", tuning=tuning, case=case.id, rev=case.rev, enqueued=enqueued, via="api")
        result = SubmitResult(tuning=tuning, case=case.id, rev=case.rev, enqueued=enqueued)
        return json_response(result, 201 if enqueued else 200)

    async def prometheus(self, request: Request) -> Response:
        return Response(await self.metrics.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(self, request: Request) -> Response:
        return Response(self.document, media_type="application/json")

    async def dashboard(self, request: Request) -> Response:
        return FileResponse(DASHBOARD / "index.html", headers={"Content-Security-Policy": CSP})


def openapi_document(endpoints: list[Endpoint]) -> dict[str, Any]:
    """An OpenAPI 3.1 document: the endpoints' paths, and their models' JSON Schemas as components."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorBody, "serialization")]
    for e in endpoints:
        if e.body is not None:
            wanted.append((e.body, "validation"))
        if not isinstance(e.answer, str):
            wanted.append((e.answer, "serialization"))
    refs, defs = models_json_schema(list(dict.fromkeys(wanted)), ref_template=REF)
    error = {"content": {"application/json": {"schema": refs[(ErrorBody, "serialization")]}}}
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        if isinstance(e.answer, str):
            kind = "object" if e.answer == "application/json" else "string"
            content: dict[str, Any] = {e.answer: {"schema": {"type": kind}}}
        else:
            content = {"application/json": {"schema": refs[(e.answer, "serialization")]}}
        responses: dict[str, Any] = {"200": {"description": "OK", "content": content}}
        if e.body is not None:
            responses["201"] = {"description": "Created", "content": content}
        responses |= {str(code): {"description": "Error", **error} for code in e.errors}
        params: list[dict[str, Any]] = [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string", "pattern": SLUG_PATTERN}}
            for n in re.findall(r"{(\w+)}", e.path)
        ]
        if e.query is not None:
            schema = e.query.model_json_schema(ref_template=REF)
            for name, prop in schema["properties"].items():
                required = name in schema.get("required", [])
                doc = prop.get("description", "")
                params.append(
                    {"name": name, "in": "query", "required": required, "schema": prop, "description": doc}
                )
        op: dict[str, Any] = {"operationId": e.handler.__name__, "summary": e.summary, "responses": responses}
        if params:
            op["parameters"] = params
        if e.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(e.body, "validation")]}},
            }
        if e.method != "GET":
            op["security"] = [{"bearer": []}]
        paths.setdefault(e.path, {})[e.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "tunefleet", "version": _version(), "description": __doc__},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _version() -> str:
    try:
        return version("tunefleet")
    except PackageNotFoundError:
        return "0"


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return Response(exc.body.model_dump_json(), exc.status, exc.headers, media_type="application/json")


async def on_fleet_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, UnknownTuningError):
        return json_response(ErrorBody(error=str(exc)), 404)
    if isinstance(exc, RedisError | RedisUnavailableError):
        log.warning("api_redis_unavailable", path=request.url.path, error=str(exc))
        return json_response(ErrorBody(error="the fleet's Redis is unavailable"), 503)
    log.error("api_failed", path=request.url.path, error=str(exc))
    return json_response(ErrorBody(error=str(exc)), 500)


def create_app(client: TunefleetClient, settings: FleetSettings) -> Starlette:
    """The API and dashboard of the fleet that `client` is open on (it must be open already)."""
    api = Api(client, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await api.metrics.mark_start()
        except (RedisError, OSError) as exc:
            log.warning("metrics_tail_start_failed", error=str(exc))
        tail = asyncio.create_task(api.metrics.tail())
        try:
            yield
        finally:
            tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tail

    routes: list[BaseRoute] = [Route(e.path, e.handler, methods=[e.method]) for e in api.endpoints]
    routes.append(Mount("/static", StaticFiles(directory=DASHBOARD), name="static"))
    handlers = {HttpError: on_http_error, TunefleetError: on_fleet_error, RedisError: on_fleet_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.state.api = api
    return app
