"""A case a worker holds that waits (for resume, the improvements lock, an apply) shows that wait as its
state, not the step it last ran; the lock's holder shows as its case and worker. Checked in status (JSON
and table), the watch's snapshot and view, and the metrics."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, RenderableType

from service.cli.render import status_table
from service.core.models.status import FleetStatus
from service.kinds.registry import slices
from service.metrics import FleetMetrics
from service.watch.snapshot import WatchSnapshot, take_snapshot
from service.watch.view import overview
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning


def text_of(renderable: RenderableType, width: int = 200) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


async def fleet_when(
    fleet: Fleet, ok: Callable[[FleetStatus], bool], timeout_s: float, what: str
) -> FleetStatus:
    """Poll the fleet's status until `ok` holds; that status."""
    deadline = time.monotonic() + timeout_s
    async with fleet.client() as client:
        while True:
            status = await client.status()
            if status.tunings and ok(status):
                return status
            assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
            await asyncio.sleep(fleet.settings.poll_delay_s)


async def watch_and_metrics(fleet: Fleet) -> tuple[WatchSnapshot, FleetMetrics]:
    async with fleet.client() as client:
        snapshot = await take_snapshot(client.redis, fleet.settings.queue, event_count=5)
        metrics = FleetMetrics(client.redis, fleet.settings.queue, slices(fleet.settings))
        await metrics.refresh()
    return snapshot, metrics


async def test_a_paused_fleet_shows_its_cases_waiting_for_resume(fleet: Fleet, tmp_path: Path) -> None:
    """Paused mid-tuning, every case a worker holds ends its step and then shows `waiting for resume`
    (not `analyze` or `apply`) in status, watch and metrics; after resume they all complete."""
    cases = [case(f"c{i}", rules=[f"c{i}-a", f"c{i}-b"]) for i in range(3)]
    adapter = demo_adapter(run_ms=300, analyze_ms=300, apply_ms=100)
    await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=adapter))
    fleet.start_worker(concurrency=3)
    await fleet_when(fleet, lambda s: s.tunings[0].running == 3, 30, "three cases under way")
    async with fleet.client() as client:
        await client.pause()
    status = await fleet_when(
        fleet, lambda s: s.tunings[0].waiting_by_cause.get("resume") == 3, 30, "three waiting for resume"
    )
    (t1,) = status.tunings
    assert (t1.running, t1.running_by_step) == (3, {})
    assert "3 waiting for resume" in text_of(status_table(status))
    snapshot, metrics = await watch_and_metrics(fleet)
    assert [r.state for r in snapshot.running] == ["waiting for resume"] * 3
    assert {r.step for r in snapshot.running} == {"run"}
    assert "3 waiting for resume" in text_of(overview(snapshot, 0, 200, 40))
    sample = metrics.registry.get_sample_value
    assert sample("tunefleet_cases_blocked", {"tuning": "t1", "waiting_for": "resume"}) == 3
    assert sample("tunefleet_cases_blocked", {"tuning": "t1", "waiting_for": "lock"}) == 0
    assert sample("tunefleet_cases_running", {"tuning": "t1", "step": "analyze"}) is None
    async with fleet.client() as client:
        await client.resume()
    rows = await fleet.wait_finished(len(cases))
    assert {r.state for r in rows.values()} == {"completed"}


async def test_waits_for_the_lock_and_for_an_apply_show_with_the_lock_holder(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With slow applies, one case shows `waiting for the lock` while the other applies, and a run start
    shows `waiting for an apply`; the lock shows its holder's case and worker, not its token."""
    cases = [case("a", rules=["a-1", "a-2"]), case("b", rules=["b-1", "b-2"])]
    adapter = demo_adapter(run_ms=50, analyze_ms=50, apply_ms=1500)
    await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=adapter))
    fleet.start_worker(concurrency=2)

    def lock_wait(s: FleetStatus) -> bool:
        t = s.tunings[0]
        return t.waiting_by_cause == {"lock": 1} and t.running_by_step == {"apply": 1} and t.lock.held

    status = await fleet_when(fleet, lock_wait, 30, "an apply holding the lock and one waiting for it")
    (t1,) = status.tunings
    (worker,) = status.workers
    holder = t1.lock.holder
    assert holder is not None and holder.case in ("a", "b") and holder.worker == worker.name
    table = text_of(status_table(status))
    assert "1 waiting for the lock" in table
    assert f"held by case {holder.case} r1 on worker {worker.name}" in table
    assert f"#{t1.lock.fence}" not in table
    snapshot, metrics = await watch_and_metrics(fleet)
    states = {r.case: r.state for r in snapshot.running}
    assert sorted(states.values()) == ["apply", "waiting for the lock"]
    assert states[holder.case] == "apply"
    assert f"held by {holder.case} r1 on {worker.name}" in text_of(overview(snapshot, 0, 200, 40))
    labels = {"tuning": "t1", "case": holder.case, "worker": worker.name}
    assert metrics.registry.get_sample_value("tunefleet_improvements_lock_holder", labels) == 1
    blocked = {"tuning": "t1", "waiting_for": "lock"}
    assert metrics.registry.get_sample_value("tunefleet_cases_blocked", blocked) == 1

    status = await fleet_when(
        fleet, lambda s: s.tunings[0].waiting_by_cause == {"apply": 1}, 30, "a run start waiting for an apply"
    )
    assert "1 waiting for an apply" in text_of(status_table(status))
    rows = await fleet.wait_finished(len(cases))
    assert {r.state for r in rows.values()} == {"completed"}
