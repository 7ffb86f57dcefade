"""Prometheus metrics of a real fleet: live state read at scrape time, histograms from the event stream."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core.events import EventSink
from service.core.models.api import StatusView
from service.core.models.events import EventKind
from service.core.settings import FleetSettings
from service.kinds.registry import counter_rules
from service.metrics import FleetMetrics
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning
from tests.support.tools import require_tool

CASES = [
    case("pass"),
    case("one-apply", rules=["one-apply-a"]),
    case("two-applies", rules=["two-applies-a", "two-applies-b"]),
    case("flawed", flawed=True),
    case("voids", voids={"nomem-1": 1}),
]


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings) as opened:
        yield opened


@pytest.fixture
async def app(client: TunefleetClient, settings: FleetSettings) -> AsyncIterator[Starlette]:
    """The API app with its lifespan running (so the event tail follows the stream from now on)."""
    built = create_app(client, settings.model_copy(update={"api_public_read": True}))
    async with built.router.lifespan_context(built):
        yield built


def metrics_of(app: Starlette) -> FleetMetrics:
    metrics: FleetMetrics = app.state.api.metrics
    return metrics


async def scrape(app: Starlette) -> str:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        answer = await web.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return answer.text


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


@pytest.fixture
async def ran(fleet: Fleet, app: Starlette, tmp_path: Path) -> Fleet:
    """The cases above run to their end by two worker processes while the app tails the events."""
    await fleet.start_tuning(write_tuning(tmp_path / "tuning", CASES))
    fleet.start_worker(concurrency=3)
    fleet.start_worker(concurrency=3)
    await fleet.wait_finished(len(CASES))
    async with fleet.client() as client:  # one worker may end every case before the other announces itself

        async def announced() -> int:
            return len((await client.status()).workers)

        async with asyncio.timeout(30):  # the second worker's presence, within its first heartbeats
            while await announced() < 2:
                await asyncio.sleep(0.05)

        async def drained() -> bool:  # a case's result lands before its worker takes its job off the queue
            return (await client.status()).queue_depth == 0

        await wait_until(drained, 30, "the ended cases' jobs off the queue")
    finishes = sum(e["kind"] == "step_finished" for e in fleet.events())
    registry = metrics_of(app).registry
    await wait_until(
        lambda: registry.get_sample_value("tunefleet_events_total", {"kind": "step_finished"}) == finishes,
        10,
        "the tail to count every step_finished event",
    )
    return fleet


async def test_a_scrape_agrees_with_the_fleet_status(
    ran: Fleet, app: Starlette, client: TunefleetClient
) -> None:
    """Every live-state metric equals the status the API reports, and the histograms count every step."""
    found = samples(await scrape(app))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        status = StatusView.model_validate_json((await web.get("/api/status")).content)
    (t1,) = status.tunings
    assert value(found, "tunefleet_redis_up") == 1
    assert value(found, "tunefleet_queue_depth") == status.queue_depth == 0
    assert value(found, "tunefleet_cases_in_progress") == status.in_progress == 0
    for state in ("completed", "difficult", "failed", "cancelled"):
        assert value(found, "tunefleet_cases_finished", tuning="t1", state=state) == getattr(t1, state)
    assert value(found, "tunefleet_cases_finished", tuning="t1", state="completed") == 4
    assert value(found, "tunefleet_cases_submitted_total", tuning="t1") == t1.submitted == len(CASES)
    for outcome, count in t1.runs_by_outcome.items():
        assert value(found, "tunefleet_runs_total", tuning="t1", outcome=outcome) == count
    run_finishes = sum(e["kind"] == "step_finished" and e.get("step") == "run" for e in ran.events())
    assert sum(t1.runs_by_outcome.values()) == run_finishes > len(CASES)
    assert value(found, "tunefleet_tokens_total", tuning="t1") == t1.tokens > 0
    assert value(found, "tunefleet_cost_usd_total", tuning="t1") == pytest.approx(t1.cost_usd)
    assert value(found, "tunefleet_workers_alive") == len(status.workers) == 2
    assert value(found, "tunefleet_breaker_open") == 0
    assert value(found, "tunefleet_improvements_lock_held", tuning="t1") == 0
    events = ran.events()
    for step in ("run", "analyze", "apply"):
        finished = sum(e["kind"] == "step_finished" and e.get("step") == step for e in events)
        assert value(found, "tunefleet_step_duration_seconds_count", tuning="t1", step=step) == finished > 0
    waits = [e for e in events if e["kind"] == "step_started" and "lock_wait_ms" in e.get("data", {})]
    if waits:  # the applies report how long they waited for the improvements lock
        assert value(found, "tunefleet_improvements_lock_wait_seconds_count", tuning="t1") == len(waits)


async def test_promtool_accepts_the_scrape(ran: Fleet, app: Starlette, tmp_path: Path) -> None:
    """`promtool check metrics` finds nothing to say about a scrape (naming, units, help, types)."""
    promtool = require_tool("promtool")
    text = await scrape(app)
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr


@pytest.mark.timeout(120)
async def test_the_breaker_shows_while_the_sandbox_is_down(
    fleet: Fleet, app: Starlette, tmp_path: Path
) -> None:
    """A sandbox outage shows as breaker_open 1 with a trip and probes, and breaker_open 0 once it ends."""
    outage = tmp_path / "sandbox-down"
    outage.touch()
    adapter = demo_adapter(run_ms=50, outage_file=str(outage))
    await fleet.start_tuning(write_tuning(tmp_path / "tuning", [case("a"), case("b")], adapter=adapter))
    fleet.start_worker(concurrency=2)
    last: dict[str, float] = {}

    async def poll() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        found = samples(await scrape(app))
        last.update({"open": value(found, "tunefleet_breaker_open")})
        last.update({"probes": value(found, "tunefleet_breaker_probes_total")})
        last.update({"trips": value(found, "tunefleet_breaker_trips_total")})
        return found

    for _ in range(200):
        await poll()
        if last["open"] == 1 and last["probes"] >= 1:
            break
        await asyncio.sleep(0.1)
    assert last["open"] == 1 and last["trips"] == 1 and last["probes"] >= 1
    assert value(await poll(), "tunefleet_cases_finished", tuning="t1", state="failed") == 0
    outage.unlink()
    await fleet.wait_finished(2)
    found = await poll()
    assert last["open"] == 0 and last["trips"] == 1
    assert value(found, "tunefleet_cases_finished", tuning="t1", state="completed") == 2


async def test_lock_waits_from_the_stream_fill_the_histogram(
    settings: FleetSettings, client: TunefleetClient, app: Starlette
) -> None:
    """An apply's step_started event with lock_wait_ms lands in the lock-wait histogram, in seconds."""
    sink = EventSink(client.redis, client.store, settings.events_max, counter_rules(settings))
    await sink.emit(EventKind.STEP_STARTED, "t9", case="c", rev=1, phase="nomem", attempt=1, step="apply",
                    data={"lock_wait_ms": 2500, "fence": 7})  # fmt: skip
    await sink.emit(EventKind.STEP_STARTED, "t9", case="c", rev=1, phase="nomem", attempt=1, step="run")
    registry = metrics_of(app).registry
    labels = {"tuning": "t9"}
    await wait_until(
        lambda: registry.get_sample_value("tunefleet_improvements_lock_wait_seconds_count", labels) == 1,
        10,
        "the tail to see the apply start",
    )
    assert registry.get_sample_value("tunefleet_improvements_lock_wait_seconds_sum", labels) == 2.5
    assert (
        registry.get_sample_value("tunefleet_improvements_lock_wait_seconds_bucket", {**labels, "le": "2.5"})
        == 1
    )
    assert (
        registry.get_sample_value("tunefleet_improvements_lock_wait_seconds_bucket", {**labels, "le": "1.0"})
        == 0
    )
