"""A case that has run is resumed before fresh cases: one whose worker was killed, as soon as its lease
runs out and a slot frees, and one handed back by a stopping worker, at the next free slot; neither waits
behind the queue."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.support.fleet import Fleet, case, demo_adapter, event_time_s, wait_until, write_tuning
from tests.support.redis_server import RedisServer

CASES = 80
SLOTS = 2
ADAPTER = demo_adapter(run_ms=300, analyze_ms=100)
"""A passing case: 4 steps, about a second; two workers of 2 slots drain four a second at best."""


def _started(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "case_started"]


def _running_on(events: list[dict[str, Any]], pid: int) -> set[str]:
    """The cases a worker process started and that have not ended or been handed back since."""
    last: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("case"):
            last[e["case"]] = e
    ending = {"case_completed", "case_difficult", "case_failed", "case_cancelled", "case_requeued"}
    return {c for c, e in last.items() if e["kind"] not in ending and e.get("worker", "").endswith(f":{pid}")}


async def _deep_queue(fleet: Fleet, tmp_path: Path, redis_server: RedisServer) -> tuple[Any, Any]:
    """Two workers of SLOTS slots, each running SLOTS cases, with more than half the cases still queued."""
    await fleet.start_tuning(
        write_tuning(tmp_path / "t", [case(f"c{i:03d}") for i in range(CASES)], adapter=ADAPTER)
    )
    doomed = fleet.start_worker(concurrency=SLOTS)
    await wait_until(
        lambda: len(_running_on(fleet.events(), doomed.pid)) == SLOTS, 30, "the first worker full"
    )
    other = fleet.start_worker(concurrency=SLOTS)
    await wait_until(
        lambda: len(_running_on(fleet.events(), other.pid)) == SLOTS, 30, "the second worker full"
    )
    assert redis_server.zcard(fleet.settings.queue) > CASES // 2
    return doomed, other


async def test_a_killed_workers_cases_restart_soon_after_their_lease_runs_out(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SIGKILL of a full worker while dozens of cases wait: each of its cases starts again on the other
    worker within a lease, plus the 2 s a case takes at most to free a slot there, plus 2 s of slack;
    fresh cases would have kept it waiting about ten seconds."""
    doomed, _ = await _deep_queue(fleet, tmp_path, redis_server)
    held = _running_on(fleet.events(), doomed.pid)
    doomed.send_signal(signal.SIGKILL)
    killed_at = time.time()
    doomed.wait()

    def restarts() -> dict[str, float]:
        return {
            e["case"]: event_time_s(e) - killed_at
            for e in _started(fleet.events())
            if e["case"] in held and event_time_s(e) >= killed_at
        }

    await wait_until(lambda: len(restarts()) == len(held), 60, "the killed worker's cases to restart")
    bound_s = fleet.settings.lease_s + 2.0 + 2.0
    assert max(restarts().values()) <= bound_s, (restarts(), redis_server.zcard(fleet.settings.queue))


async def test_a_stopping_workers_cases_are_taken_before_fresh_ones(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SIGTERM of a full worker while dozens of cases wait: the other worker's next starts are the cases
    the stopping worker handed back, before any fresh case."""
    doomed, other = await _deep_queue(fleet, tmp_path, redis_server)
    held = _running_on(fleet.events(), doomed.pid)
    doomed.send_signal(signal.SIGTERM)
    doomed.wait()
    handed_back = {e["case"] for e in fleet.events() if e["kind"] == "case_requeued"}
    assert handed_back == held
    stopped_at = max(event_time_s(e) for e in fleet.events() if e["kind"] == "case_requeued")

    def next_starts() -> list[str]:
        return [
            e["case"]
            for e in _started(fleet.events())
            if e["worker"].endswith(f":{other.pid}") and event_time_s(e) >= stopped_at
        ]

    await wait_until(lambda: len(next_starts()) >= len(held), 60, "the other worker's next starts")
    assert set(next_starts()[: len(held)]) == held, next_starts()
