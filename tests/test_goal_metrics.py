"""The goals' Prometheus metrics on a real fleet: goals by status and iterations, from `tf:goals`."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core import keys
from service.core.settings import FleetSettings
from service.kinds.goals.models import FINAL_STATUSES
from tests.support.fleet import Fleet, wait_until
from tests.support.goals import goal_state, start_goal, wait_goal_ended, write_goal
from tests.support.tools import needs_tool

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def app(settings: FleetSettings) -> AsyncIterator[Starlette]:
    async with TunefleetClient(settings) as client:
        yield create_app(client, settings.model_copy(update={"api_public_read": True}))


async def scrape(app: Starlette) -> str:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        answer = await web.get("/metrics")
    assert answer.status_code == 200
    return answer.text


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def by_status(found: Samples) -> dict[str, float]:
    return {dict(labels)["status"]: v for (name, labels), v in found.items() if name == "tunefleet_goals"}


@pytest.fixture
async def ended(fleet: Fleet, tmp_path: Path) -> Fleet:
    """Three goals run to their end by a worker: completed in 2 iterations, incomplete after 1, and
    cancelled before a worker took it; and a fourth queued with no worker to take it."""
    root = tmp_path / "goals"
    await start_goal(fleet, write_goal(root, "done", demo={"complete_at": 2}))
    limits = {"max_iterations": 1}
    await start_goal(fleet, write_goal(root, "short", limits=limits, demo={"complete_at": 9}))
    await start_goal(fleet, write_goal(root, "dropped"))
    async with fleet.client() as client:
        assert await client.goals.cancel("dropped")
    fleet.start_worker()
    for goal_id in ("done", "short", "dropped"):
        await wait_goal_ended(fleet, goal_id)
    async with fleet.client() as client:
        for _ in range(200):  # the worker writes a goal's summary to Redis just after its state file
            if all(s.status in FINAL_STATUSES for s in await client.goals.summaries()):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("timed out waiting for the ended goals' summaries in Redis")
    fleet.teardown()  # no worker takes the next one
    await start_goal(fleet, write_goal(root, "waiting"))
    return fleet


async def test_goals_are_counted_by_status_with_their_iterations(ended: Fleet, app: Starlette) -> None:
    """tunefleet_goals has every status with the number of goals in it, and
    tunefleet_goal_iterations_total the iterations every goal begun, as the store records them."""
    found = samples(await scrape(app))
    assert by_status(found) == {
        "queued": 1,
        "running": 0,
        "completed": 1,
        "incomplete": 1,
        "failed": 0,
        "cancelled": 1,
    }
    begun = 0
    for goal_id in ("done", "short", "dropped"):
        state = goal_state(ended, goal_id)
        assert state is not None
        begun += len(state.iterations)
    assert found[("tunefleet_goal_iterations_total", frozenset())] == begun >= 3


async def test_an_unreadable_entry_is_skipped(settings: FleetSettings, app: Starlette) -> None:
    """A hash entry that is not a goal summary is left out; the others are still counted."""
    async with TunefleetClient(settings) as client:
        good = '{"id": "g1", "status": "running", "iteration": 4, "updated_at": "2026-01-01T00:00:00Z"}'
        await client.redis.hset(keys.goals(), mapping={"g1": good, "bad": "{not json"})  # type: ignore[misc]
    found = samples(await scrape(app))
    assert by_status(found)["running"] == 1 and sum(by_status(found).values()) == 1
    assert found[("tunefleet_goal_iterations_total", frozenset())] == 4


@needs_tool("promtool")
async def test_promtool_accepts_the_goal_metrics(ended: Fleet, app: Starlette) -> None:
    """`promtool check metrics` finds nothing to say about a scrape with goals in it."""
    text = await scrape(app)
    assert "tunefleet_goals{" in text
    promtool = shutil.which("promtool") or "promtool"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr


@pytest.fixture
async def tailing(settings: FleetSettings) -> AsyncIterator[Starlette]:
    """The API app with its lifespan running, so that its metrics tail the event stream from now on."""
    async with TunefleetClient(settings) as client:
        built = create_app(client, settings.model_copy(update={"api_public_read": True}))
        async with built.router.lifespan_context(built):
            yield built


@needs_tool("promtool")
async def test_goal_step_durations_reach_the_step_histogram(
    fleet: Fleet, tailing: Starlette, tmp_path: Path
) -> None:
    """A goal's finished steps reach the stream in the one shape (step, iteration, duration_ms at the top
    level) and tunefleet_step_duration_seconds by step (plan, work, review), with the durations its state
    records, in a scrape that `promtool check metrics` accepts."""
    await start_goal(fleet, write_goal(tmp_path / "goals", "timed", demo={"complete_at": 2, "step_ms": 150}))
    fleet.start_worker()
    state = await wait_goal_ended(fleet, "timed")
    assert state.status == "completed" and len(state.iterations) == 2
    recorded = sorted(
        (it.iteration, step, record.duration_ms)
        for it in state.iterations
        for step, record in (("plan", it.plan), ("work", it.work), ("review", it.review))
        if record is not None
    )
    assert len(recorded) == 6 and min(ms for _, _, ms in recorded) >= 150
    async with fleet.client() as client:
        stream = [json.loads(f[b"event"]) for _, f in await client.redis.xrange(keys.events())]
    finished = [e for e in stream if e.get("goal") == "timed" and e["kind"] == "step_finished"]
    assert sorted((e["iteration"], e["step"], e["duration_ms"]) for e in finished) == recorded
    registry: CollectorRegistry = tailing.state.api.metrics.registry
    name = "tunefleet_step_duration_seconds"

    def counted(step: str) -> float | None:
        return registry.get_sample_value(f"{name}_count", {"tuning": "", "step": step})

    steps = ("plan", "work", "review")
    await wait_until(lambda: all(counted(s) == 2 for s in steps), 10, "the tail to see the goal's steps")
    for step in steps:
        seconds = registry.get_sample_value(f"{name}_sum", {"tuning": "", "step": step})
        assert seconds == pytest.approx(sum(ms for _, s, ms in recorded if s == step) / 1000)
    text = await scrape(tailing)
    assert f'{name}_count{{step="work",tuning=""}} 2.0' in text
    promtool = shutil.which("promtool") or "promtool"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr
