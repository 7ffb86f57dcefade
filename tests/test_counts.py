"""Run counts that do not lie: every run set aside is a void, whoever voided it, and the counts come back
from the store when Redis loses them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from service.core.models.status import TuningStatus
from service.core.settings import FleetSettings
from service.kinds.registry import slices
from service.metrics import FleetMetrics
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning

CASES = [
    case("killed-then-voided", kills={"nomem-1": 1}, voids={"nomem-1": 1}),
    case("voided-twice", voids={"nomem-1": 2}),
    case("voided-in-mem", rules=["voided-in-mem-a"], voids={"mem-1": 1}),
    case("plain"),
]
VOIDS = 5
"""Runs set aside above: one killed for memory (the runner says void), four graded void by the analyzer."""


def void_folders(settings: FleetSettings) -> int:
    """The runs the store keeps set aside, as `<attempt>.void-<n>` folders."""
    return sum(1 for p in (settings.store / "tunings/t1/cases").glob("*/r*/*/*.void-*") if p.is_dir())


async def status_when(
    fleet: Fleet, ok: Callable[[TuningStatus], bool], timeout_s: float, what: str
) -> TuningStatus:
    """Poll the status until the tuning's row satisfies `ok`; that row."""
    deadline = time.monotonic() + timeout_s
    async with fleet.client() as client:
        while True:
            tunings = (await client.status()).tunings
            if tunings and ok(tunings[0]):
                return tunings[0]
            assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
            await asyncio.sleep(fleet.settings.poll_delay_s)


def restores_logged(fleet: Fleet) -> int:
    """How many times the daemon has found Redis emptied and restored the fleet's state from the store."""
    return (fleet.logs / "daemon.log").read_text().count("redis_state_lost")


async def tuning_status(fleet: Fleet) -> TuningStatus:
    async with fleet.client() as client:
        (status,) = (await client.status()).tunings
    return status


async def test_every_run_set_aside_counts_as_a_void(fleet: Fleet, tmp_path: Path) -> None:
    """Runs voided by the analyzer count as voids as well as the runner's own: `runs_by_outcome` and
    `tunefleet_runs_total{outcome="void"}` equal the `*.void-N` folders, and `ran` the graded runs."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    fleet.start_worker(concurrency=4)
    rows = await fleet.wait_finished(len(CASES))
    assert {r.state for r in rows.values()} == {"completed"}
    await fleet.wait_counted(len(CASES))
    events = fleet.events()
    assert void_folders(fleet.settings) == VOIDS
    assert sum(e["kind"] == "attempt_set_aside" for e in events) == VOIDS
    runs = sum(e["kind"] == "step_finished" and e["step"] == "run" for e in events)
    status = await tuning_status(fleet)
    assert status.runs_by_outcome == {"void": VOIDS, "ran": runs - VOIDS}
    async with fleet.client() as client:
        metrics = FleetMetrics(client.redis, fleet.settings.queue, slices(fleet.settings))
        await metrics.refresh()
    sample = metrics.registry.get_sample_value
    assert sample("tunefleet_runs_total", {"tuning": "t1", "outcome": "void"}) == VOIDS
    assert sample("tunefleet_runs_total", {"tuning": "t1", "outcome": "ran"}) == runs - VOIDS


async def test_run_counts_are_rebuilt_from_the_store_when_redis_is_emptied(
    fleet: Fleet, tmp_path: Path
) -> None:
    """After FLUSHALL the running daemon restores `runs_by_outcome` from the store, as it was, with the
    other counters."""
    tuning = write_tuning(tmp_path / "t", CASES, adapter=demo_adapter(run_ms=20))
    fleet.start_daemon(tuning)
    await wait_until(lambda: (fleet.settings.store / "tunings/t1/events.jsonl").exists(), 30, "the daemon")
    fleet.start_worker(concurrency=4)
    await fleet.wait_finished(len(CASES))
    await fleet.wait_counted(len(CASES))
    before = await tuning_status(fleet)
    assert before.runs_by_outcome["void"] == VOIDS and before.runs_by_outcome["ran"] > len(CASES)
    restores = restores_logged(fleet)
    async with fleet.client() as client:
        await client.redis.flushall()
    after = await status_when(fleet, lambda t: t.submitted == len(CASES), 30, "the daemon to restore t1")
    # The daemon restored them from the store: the counters did not outlive the flush. (Counting keys after
    # the flush proves nothing: the daemon's and the worker's heartbeats write new ones at once.)
    assert restores_logged(fleet) == restores + 1
    assert after.runs_by_outcome == before.runs_by_outcome
    assert (after.completed, after.tokens) == (before.completed, before.tokens)
