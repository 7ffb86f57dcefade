"""/healthz and /readyz of a real worker process and a real daemon, against a real redis-server."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from service.core.io.health import HealthChecks, health_routes
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.redis_server import RedisServer, free_port


@pytest.fixture
def health_fleet(settings: FleetSettings, tmp_path: Path) -> Iterator[Fleet]:
    ports = {"health_port": free_port(), "api_port": free_port()}
    fleet = Fleet(settings.model_copy(update=ports), tmp_path / "logs")
    yield fleet
    fleet.teardown()


def probe(port: int, path: str, timeout_s: float = 1.0) -> httpx.Response | None:
    """One GET of a health endpoint; None when the process does not answer in time (or at all)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=timeout_s)
    except httpx.TransportError:
        return None


def status_of(port: int, path: str) -> int | None:
    answer = probe(port, path)
    return None if answer is None else answer.status_code


async def wait_status(port: int, path: str, status: int, what: str, timeout_s: float = 30) -> None:
    await wait_until(lambda: status_of(port, path) == status, timeout_s, what)


async def test_worker_and_daemon_readiness_follow_redis(
    health_fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Both answer 200 on /healthz and /readyz (breaker reported); with redis-server stopped /readyz says 503
    naming Redis while /healthz stays 200; after a restart /readyz is 200 again."""
    s = health_fleet.settings
    health_fleet.start_daemon(write_tuning(tmp_path / "t", [case("c1")]))
    health_fleet.start_worker()
    ports = {"worker": s.health_port, "daemon": s.api_port}
    for name, port in ports.items():
        await wait_status(port, "/readyz", 200, f"the {name} to be ready")
        ready = probe(port, "/readyz")
        assert ready is not None
        assert ready.json() | {"reasons": []} == {
            "ready": True,
            "process": name,
            "redis": "ok",
            "store": "ok",
            "breaker": "closed",
            "reasons": [],
        }
        assert status_of(port, "/healthz") == 200
    redis_server.stop()
    for name, port in ports.items():
        await wait_status(port, "/readyz", 503, f"the {name} to be unready", 15)
        body = probe(port, "/readyz", timeout_s=5)
        assert body is not None and body.json()["redis"] == "unavailable"
        assert any("Redis" in reason for reason in body.json()["reasons"])
        assert status_of(port, "/healthz") == 200, f"the {name} should stay alive without Redis"
    redis_server.start()
    for name, port in ports.items():
        await wait_status(port, "/readyz", 200, f"the {name} to be ready again")


async def test_a_stopped_worker_fails_its_liveness_and_recovers(health_fleet: Fleet) -> None:
    """Under SIGSTOP the worker's /healthz gets no answer within the probe's timeout; after SIGCONT it is
    200 again; on SIGTERM the worker exits cleanly and its health port closes."""
    port = health_fleet.settings.health_port
    health_fleet.settings.store.mkdir(parents=True, exist_ok=True)
    worker = health_fleet.start_worker()
    await wait_status(port, "/healthz", 200, "the worker to be alive")
    worker.send_signal(signal.SIGSTOP)
    try:
        assert probe(port, "/healthz", timeout_s=1.0) is None
    finally:
        worker.send_signal(signal.SIGCONT)
    await wait_status(port, "/healthz", 200, "the worker to be alive again", 15)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0  # the health server stops with the worker
    assert probe(port, "/healthz") is None


async def test_an_unwritable_store_makes_the_process_unready(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A store path that takes no file (here a regular file) makes readiness fail, naming the store."""
    from service.core.io.connection import connect

    not_a_folder = tmp_path / "store"
    not_a_folder.write_text("a file, not a folder")
    settings = FleetSettings(redis_url=redis_server.url, store=not_a_folder)
    redis = await connect(settings)
    try:
        ready = await HealthChecks("worker", redis, not_a_folder, 5.0).readiness()
    finally:
        await redis.aclose()
    assert (ready.ready, ready.redis, ready.store) == (False, "ok", "unwritable")
    assert str(not_a_folder) in ready.reasons[0]


async def test_a_worker_whose_health_port_is_taken_says_so_and_exits(health_fleet: Fleet) -> None:
    """A health port already in use stops the worker at start with exit code 2, naming the address."""
    with socket.create_server(("127.0.0.1", health_fleet.settings.health_port)):
        worker = health_fleet.start_worker()
        assert worker.wait(timeout=30) == 2
    assert f"health endpoints cannot listen on 127.0.0.1:{health_fleet.settings.health_port}" in (
        health_fleet.log_of(0)
    )


async def test_a_loop_that_stopped_turning_is_not_alive(redis_server: RedisServer, tmp_path: Path) -> None:
    """/healthz answers 503 with alive false once the loop's last turn is older than stale_after_s, 200
    before; /readyz does not depend on it."""
    from service.core.io.connection import connect

    settings = FleetSettings(redis_url=redis_server.url, store=tmp_path)
    redis = await connect(settings)
    age_s = [0.5]
    checks = HealthChecks("worker", redis, tmp_path, 2.0, turn_age_s=lambda: age_s[0])
    app = Starlette(routes=health_routes(checks))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            assert (await http.get("/healthz")).status_code == 200
            age_s[0] = 2.5
            stale = await http.get("/healthz")
            assert (stale.status_code, stale.json()["alive"]) == (503, False)
            assert (await http.get("/readyz")).status_code == 200
    finally:
        await redis.aclose()
