"""Health endpoints of a fleet process, for container probes and load balancers.

- `GET /healthz`: 200 while the process is alive and its loop turns (a worker: its poll loop has
  turned within `stale_after_s`; the daemon: its event loop runs a callback within that time), 503
  otherwise. A process that is stopped or blocked cannot answer at all: the probe's timeout fails it.
- `GET /readyz`: 200 when Redis answers PING (and is not full: at `maxmemory` under `noeviction`)
  and the store folder takes a new file; 503 with the reasons otherwise. Either way the body carries
  the fleet's sandbox breaker state.

Workers serve them on `health_host:health_port` (`serve_health`); the daemon adds the routes to its
API app, outside `/api/`, with no token.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import structlog
import uvicorn
from pydantic import BaseModel
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.core import keys
from service.core.io.redis_memory import full_reason
from service.core.io.serving import EmbeddedServer, listen
from service.core.models.health import Liveness, Readiness

log = structlog.get_logger()

CHECK_TIMEOUT_S = 2.0
"""How long one readiness check (a Redis round trip, a file in the store) may take before it counts as
failed: below a probe's usual timeout, so that a probe gets the reasons rather than no answer."""
DAEMON_STALE_S = 5.0
"""The daemon's /healthz fails when its event loop takes longer than this to run a callback."""
Process = Literal["worker", "daemon"]


def _touch(folder: Path) -> None:
    """Create, write, flush and remove a file in `folder` (OSError when it cannot)."""
    fd, name = tempfile.mkstemp(prefix=".ready-", dir=folder)
    try:
        os.write(fd, b"ready\n")
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


class HealthChecks:
    """The checks behind both endpoints for one process. `turn_age_s` says how long ago the process's
    loop last turned; without it, the event loop's own delay in running a callback is measured."""

    def __init__(
        self,
        process: Process,
        redis: Redis,
        store: Path,
        stale_after_s: float,
        turn_age_s: Callable[[], float] | None = None,
    ) -> None:
        self.process: Process = process
        self._redis = redis
        self._store = store
        self.stale_after_s = stale_after_s
        self._turn_age_s = turn_age_s
        self._prober = ThreadPoolExecutor(1, thread_name_prefix="health")
        """The store check's own thread: not one of a worker's folder threads, which long copies may all
        hold for longer than the check's timeout."""

    async def liveness(self) -> Liveness:
        if self._turn_age_s is not None:
            age_s = self._turn_age_s()
        else:
            began = time.monotonic()
            await asyncio.sleep(0)
            age_s = time.monotonic() - began
        return Liveness(
            alive=age_s <= self.stale_after_s,
            process=self.process,
            last_turn_s=round(age_s, 3),
            stale_after_s=self.stale_after_s,
        )

    async def readiness(self) -> Readiness:
        reasons: list[str] = []
        redis_ok, breaker = await self._redis_check(reasons)
        store_ok = await self._store_check(reasons)
        return Readiness(
            ready=not reasons,
            process=self.process,
            redis="ok" if redis_ok else "unavailable",
            store="ok" if store_ok else "unwritable",
            breaker=breaker,
            reasons=reasons,
        )

    async def healthz(self, request: Request) -> Response:
        """GET /healthz: 200 while alive, else 503; the body is `Liveness` either way."""
        body = await self.liveness()
        return _json(body, body.alive)

    async def readyz(self, request: Request) -> Response:
        """GET /readyz: 200 when ready, else 503 with the reasons; the body is `Readiness` either way."""
        body = await self.readiness()
        if not body.ready:
            log.warning("not_ready", process=self.process, reasons=body.reasons)
        return _json(body, body.ready)

    async def _redis_check(self, reasons: list[str]) -> tuple[bool, Literal["open", "closed", "unknown"]]:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await self._redis.ping()
                state = await self._redis.hget(keys.breaker(), "state")  # type: ignore[misc]
                full = await self._redis_full()
        except TimeoutError:
            reasons.append(f"Redis did not answer PING within {CHECK_TIMEOUT_S} s")
            return False, "unknown"
        except (RedisError, OSError) as exc:
            reasons.append(f"Redis did not answer PING: {exc}")
            return False, "unknown"
        if full is not None:
            reasons.append(full)
        return full is None, "open" if state == b"open" else "closed"

    async def _redis_full(self) -> str | None:
        """Why Redis is full (at its maxmemory), if it is; None too when this process's Redis user may not
        run INFO (the fleet's ACL users: deploy/redis), whose writes then say it."""
        try:
            return full_reason(await self._redis.info("memory"))
        except NoPermissionError:
            return None

    async def _store_check(self, reasons: list[str]) -> bool:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await asyncio.get_running_loop().run_in_executor(self._prober, _touch, self._store)
        except TimeoutError:
            reasons.append(f"the store {self._store} took no file within {CHECK_TIMEOUT_S} s")
            return False
        except OSError as exc:
            reasons.append(f"the store {self._store} is not writable: {exc.strerror or exc}")
            return False
        return True


def daemon_checks(redis: Redis, store: Path) -> HealthChecks:
    """The daemon's checks: its event loop, its Redis connection and the store."""
    return HealthChecks("daemon", redis, store, DAEMON_STALE_S)


def _json(body: BaseModel, ok: bool) -> Response:
    return Response(body.model_dump_json(), 200 if ok else 503, media_type="application/json")


def health_routes(checks: HealthChecks) -> list[Route]:
    """`/healthz` and `/readyz` over `checks` (no token: probes carry none)."""
    return [
        Route("/healthz", checks.healthz, methods=["GET"]),
        Route("/readyz", checks.readyz, methods=["GET"]),
    ]


def listen_health(host: str, port: int) -> socket.socket:
    """The health endpoints' listening socket, or a TunefleetError naming the refused address."""
    return listen(host, port, "the health endpoints", backlog=64)


async def serve_health(checks: HealthChecks, sock: socket.socket) -> None:
    """Serve `/healthz` and `/readyz` on `sock` until cancelled; then stop the server and close it."""
    app = Starlette(routes=health_routes(checks))
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", server_header=False)
    server = EmbeddedServer(config)
    host, port = sock.getsockname()[:2]
    log.info("health_listening", process=checks.process, host=host, port=port)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(serving)
    finally:
        server.should_exit = True
        with contextlib.suppress(SystemExit):
            await serving
        sock.close()
