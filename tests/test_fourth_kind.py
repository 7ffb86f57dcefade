"""A fourth kind, added as docs/architecture.md "Adding a kind" says: the test-only `echo` kind
(tests/kinds/echo: a `service` and a `workers` folder) registered with one line, the `kinds` setting, and
nothing else. It runs through a real fleet (daemon, API and worker processes on a real Redis) the way the
built-in kinds do."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from service.core.io.connection import connect
from service.core.kinds import FleetParts
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.registry import slices
from tests.kinds.echo.service.fleet import EchoFleet
from tests.kinds.echo.service.models import EchoResult
from tests.kinds.echo.service.store import EchoStore
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.redis_server import free_port

REGISTRATION = ["tests.kinds.echo.service"]


@pytest.fixture
def echo_settings(settings: FleetSettings) -> FleetSettings:
    """The fleet's settings with the one registration line."""
    update = {"kinds": REGISTRATION, "api_port": free_port(), "api_public_read": True}
    return settings.model_copy(update=update)


@pytest.fixture
def echo_fleet(echo_settings: FleetSettings, tmp_path: Path) -> Any:
    f = Fleet(echo_settings, tmp_path / "logs")
    yield f
    f.teardown()


@pytest.fixture
async def echoes(echo_settings: FleetSettings) -> AsyncIterator[EchoFleet]:
    redis = await connect(echo_settings)
    try:
        yield EchoFleet(FleetParts(redis, Store(echo_settings.store), echo_settings))
    finally:
        await redis.aclose()


def started(fleet: Fleet, tuning: str, step: str) -> int:
    """How many times an echo step was started, as the tuning's events say."""
    return sum(
        e["kind"] == "step_started" and e.get("step") == step and e["data"].get("kind") == "echo"
        for e in fleet.events(tuning)
    )


async def stats(settings: FleetSettings, tuning: str) -> dict[str, int]:
    redis = Redis.from_url(settings.redis_url)
    try:
        raw = await redis.hgetall(f"tf:stats:{tuning}")
    finally:
        await redis.aclose()
    return {k.decode(): int(v) for k, v in raw.items()}


def api_up(settings: FleetSettings) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{settings.api_port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_the_kinds_setting_is_the_one_registration(echo_settings: FleetSettings) -> None:
    """With the setting, the fleet's kinds are the three built-in ones and echo; without it, not echo."""
    assert [k.name for k in slices(echo_settings)] == ["cases", "goals", "evals", "echo"]
    assert "echo" not in [k.name for k in slices(echo_settings.model_copy(update={"kinds": []}))]


async def test_an_echo_job_killed_mid_step_is_resumed_and_counted(
    echo_fleet: Fleet, echoes: EchoFleet, echo_settings: FleetSettings, tmp_path: Path
) -> None:
    """An echo job runs under a lease on a worker; SIGKILLed during its second step, it is taken over by
    another worker, which carries on at that step (the first step ran once), ends it `completed`, moves
    its counters by its events, and the daemon's API serves its result from the kind's own route."""
    tuning = write_tuning(tmp_path / "t1", [case("c1")])
    echo_fleet.start_daemon(tuning)
    first = echo_fleet.start_worker(concurrency=2)
    await wait_until(lambda: api_up(echo_settings), 60, "the daemon's API")
    store = EchoStore(Store(echo_settings.store), "t1", "e1")
    await echoes.submit("t1", "e1", steps=2)
    store.release_path(0).touch()
    await wait_until(lambda: started(echo_fleet, "t1", "step-1") == 1, 30, "the second step started")
    first.send_signal(signal.SIGKILL)
    first.wait()
    echo_fleet.start_worker(concurrency=2)
    await wait_until(lambda: started(echo_fleet, "t1", "step-1") == 2, 60, "the second step taken over")
    store.release_path(1).touch()
    await wait_until(lambda: store.result() is not None, 30, "the echo job ended")
    ended = store.result()
    assert ended is not None and ended.state == "completed" and ended.steps_done == 2
    assert started(echo_fleet, "t1", "step-0") == 1, "a recorded step ran again after the takeover"
    first_step, second_step = store.step(0), store.step(1)
    assert first_step is not None and second_step is not None
    assert first_step.lease != second_step.lease, "the second step was recorded under the first lease"
    counts = await stats(echo_settings, "t1")
    assert counts.get("echo_started") == 2 and counts.get("echo_completed") == 1, counts
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{echo_settings.api_port}") as web:
        answer = (await web.get("/api/echo/t1/e1")).json()
        missing = await web.get("/api/echo/t1/nope")
    assert EchoResult.model_validate(answer).state == "completed"
    assert missing.status_code == 404


async def test_a_running_echo_job_is_cancelled_by_its_tuning_cancel_set(
    echo_fleet: Fleet, echoes: EchoFleet, echo_settings: FleetSettings
) -> None:
    """An echo job cancelled while its first step runs is stopped by its worker within a poll and ends
    `cancelled`, naming the step it stopped, with its `job_ended` event and counter."""
    echo_fleet.start_worker(concurrency=2)
    store = EchoStore(Store(echo_settings.store), "t2", "e2")
    await echoes.submit("t2", "e2", steps=2)
    await wait_until(lambda: started(echo_fleet, "t2", "step-0") == 1, 30, "the first step started")
    await echoes.cancel("t2", "e2")
    await wait_until(lambda: store.result() is not None, 30, "the echo job ended")
    ended = store.result()
    assert ended is not None and ended.state == "cancelled", ended
    assert ended.reason == "cancelled by the user during the step-0 step"
    assert store.step(0) is None
    ends = [e for e in echo_fleet.events("t2") if e["kind"] == "job_ended"]
    assert [e["data"] for e in ends] == [{"state": "cancelled", "kind": "echo", "job": "e2"}]
    assert (await stats(echo_settings, "t2")).get("echo_cancelled") == 1
