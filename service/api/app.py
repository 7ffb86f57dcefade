"""The HTTP API and dashboard of a fleet: a Starlette app built by `create_app(client, settings)`.

Reads come from Redis (status, events) and the store (tunings, results, case detail) and need the
read token unless `api_public_read` is on; writes (submit a case or a batch, pause, resume, cancel:
service.api.controls) need the write token. Every endpoint is declared once, in `Api.endpoints`,
which routes it, guards it (service.api.http) and describes it in the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from service.api.contract import CONTRACT_PATH, contract_module
from service.api.controls import BatchError, Controls
from service.api.http import (
    READ_COOKIE,
    Endpoint,
    Guard,
    Handler,
    HttpError,
    json_response,
    parse_query,
    slug_param,
)
from service.api.openapi import openapi_document
from service.client.client import TunefleetClient
from service.client.queries import case_detail, results
from service.core import keys
from service.core.errors import RedisUnavailableError, TunefleetError, UnknownTuningError
from service.core.io.health import daemon_checks
from service.core.models.api import (
    BatchResult,
    Cancelled,
    CaseBatch,
    CaseRows,
    CasesQuery,
    ErrorBody,
    EventsPage,
    EventsQuery,
    PauseState,
    Released,
    StatusView,
    StreamEvent,
    SubmitResult,
    TuningInfo,
    TuningList,
)
from service.core.models.case import Case
from service.core.models.events import parse_event
from service.core.models.health import Liveness, Readiness
from service.core.models.status import CaseDetail
from service.core.settings import FleetSettings
from service.kinds.registry import slices
from service.metrics import FleetMetrics, fleet_snapshot

__all__ = ["Api", "create_app"]

log = structlog.get_logger()

DASHBOARD = Path(__file__).parent.parent / "dashboard"
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'"
CASES = "/api/tunings/{tuning}/cases"
TUNING = "/api/tunings/{tuning}"
READ_ERRORS = (401, 503)
WRITE_ERRORS = (401, 404, 422, 503)


def writing(
    path: str, handler: Handler, summary: str, answer: type[BaseModel], body: type[BaseModel] | None = None
) -> Endpoint:
    """A POST endpoint that needs the write token."""
    errors = (*WRITE_ERRORS, 413) if body is not None else WRITE_ERRORS
    return Endpoint("POST", path, handler, summary, answer, errors, body=body, access="write")


class Api:
    """The handlers, bound to one open fleet client."""

    def __init__(self, client: TunefleetClient, settings: FleetSettings) -> None:
        self.client = client
        self.settings = settings
        self.metrics = FleetMetrics(client.redis, settings.queue, slices(settings))
        self.guard = Guard(settings)
        w = Controls(client, settings)
        health = daemon_checks(client.redis, settings.store)
        R = READ_ERRORS  # noqa: N806 (a table reads better with short names)
        E = Endpoint  # noqa: N806
        self.endpoints = [
            E("GET", "/api/status", self.status, "Fleet status and locks", StatusView, R),
            E("GET", "/api/tunings", self.tunings, "Registered tunings", TuningList, R),
            E("GET", CASES, self.cases, "A page of result rows", CaseRows, (*R, 404, 422), CasesQuery),
            E("GET", CASES + "/{case}", self.case, "A case's tries", CaseDetail, (*R, 404, 422)),
            E("GET", "/api/events", self.events, "Stream events", EventsPage, (*R, 422), EventsQuery),
            writing(CASES, w.submit, "Submit a case", SubmitResult, Case),
            writing(TUNING + "/batch", w.batch, "Submit cases, all or none", BatchResult, CaseBatch),
            writing("/api/pause", w.pause, "Pause the fleet: no run starts", PauseState),
            writing("/api/resume", w.resume, "Resume the fleet", PauseState),
            writing(TUNING + "/resume", w.resume_tuning, "Release a tuning's hold", Released),
            writing(TUNING + "/cancel", w.cancel_tuning, "Cancel every unfinished case", Cancelled),
            writing(CASES + "/{case}/cancel", w.cancel_case, "Cancel one case", Cancelled),
            E("GET", "/healthz", health.healthz, "Alive (503 when not; no token)", Liveness, access="public"),
            E(
                "GET",
                "/readyz",
                health.readyz,
                "Ready (503 with the reasons; no token)",
                Readiness,
                access="public",
            ),
            E("GET", "/metrics", self.prometheus, "Prometheus metrics", "text/plain", R),
            E("GET", "/openapi.json", self.openapi, "This document", "application/json", access="public"),
            E("GET", "/", self.dashboard, "The dashboard", "text/html", R, access="public"),
            E("GET", CONTRACT_PATH, self.contract, "The event contract", "text/javascript", access="public"),
        ]

        # Every kind's own routes (service.core.kinds): they read with the read token, and their writes
        # need the write token.
        for kind in slices(settings):
            module = kind.front("api")
            if module is not None:
                routes: list[Endpoint] = module.endpoints(client, self.guard)
                self.endpoints += [
                    replace(e, access="write") if e.method != "GET" and e.access == "read" else e
                    for e in routes
                ]
        self.document = json.dumps(openapi_document(self.endpoints, __doc__ or "")).encode()
        self.contract_js = contract_module().encode()

    def route(self, endpoint: Endpoint) -> Handler:
        """The endpoint's handler behind its access check."""

        async def guarded(request: Request) -> Response:
            self.guard.check(request, endpoint.access)
            return await endpoint.handler(request)

        return guarded

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
        page = rows[query.offset : query.offset + query.limit]
        following = query.offset + len(page)
        return json_response(
            CaseRows(
                tuning=store.name,
                state=query.state,
                cases=page,
                total=len(rows),
                offset=query.offset,
                next_offset=following if following < len(rows) else None,
            )
        )

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
                event = parse_event(fields[b"event"])
            except (KeyError, ValidationError) as exc:
                log.warning("api_event_unreadable", id=entry_id.decode(), error=str(exc))
                continue
            page.append(StreamEvent(id=entry_id.decode(), event=event))
        last = raw[-1][0].decode() if raw else query.after
        return json_response(EventsPage(events=page, last_id=last))

    async def prometheus(self, request: Request) -> Response:
        return Response(await self.metrics.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(self, request: Request) -> Response:
        return Response(self.document, media_type="application/json")

    async def contract(self, request: Request) -> Response:
        """The event contract as the dashboard's JavaScript module (service.api.contract)."""
        return Response(self.contract_js, media_type="text/javascript")

    async def dashboard(self, request: Request) -> Response:
        """The dashboard page; `/?token=…` with the read token keeps it as an HttpOnly cookie (Secure over
        TLS), from which the page's own requests read, and sends the browser back to `/` (the token leaves
        the address bar). The write token is never kept so (403)."""
        offered = request.query_params.get("token")
        if offered is not None:
            self.guard.cookie_token(offered)  # the read token only: 401, or 403 for the write token
            back = RedirectResponse("/", status_code=303)
            secure = self.guard.cookie_secure(request)
            back.set_cookie(READ_COOKIE, offered, httponly=True, samesite="strict", path="/", secure=secure)
            return back
        self.guard.read(request)
        return FileResponse(DASHBOARD / "index.html", headers={"Content-Security-Policy": CSP})


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    body = exc.refused if isinstance(exc, BatchError) else exc.body
    return Response(body.model_dump_json(), exc.status, exc.headers, media_type="application/json")


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

    routes: list[BaseRoute] = [Route(e.path, api.route(e), methods=[e.method]) for e in api.endpoints]
    routes.append(Mount("/static", StaticFiles(directory=DASHBOARD), name="static"))
    handlers = {HttpError: on_http_error, TunefleetError: on_fleet_error, RedisError: on_fleet_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.state.api = api
    return app
