"""A case that has run is resumed before fresh cases: one whose worker was killed, as soon as its lease
runs out and a slot frees, and one handed back by a stopping worker, at the next free slot; neither waits
behind the queue. A worker that takes back its own lost case runs one try of it at a time."""

from __future__ import annotations

import asyncio
import signal
import sys
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


STUBBORN_FIRST_RUN = """
import json, os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1]).parent / "first-run.pid"
if not marker.exists():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(0.2)
time.sleep(4)
json.dump({"answer": "pass", "turns": 1}, open(sys.argv[2], "w"))
"""


async def test_a_worker_that_takes_back_its_own_lost_case_runs_one_try_at_a_time(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A lone worker paused past its lease, whose try of a case then waits for its agent (which ignores
    SIGTERM) to end, claims that case again only once the try has ended: one new try, whose lease the
    old try's finish leaves alone, carries the case to its end."""
    runner = {
        "kind": "command",
        "timeout_s": 60,
        "argv": [
            sys.executable,
            "-c",
            STUBBORN_FIRST_RUN.replace("{", "{{").replace("}", "}}"),
            str(fleet.settings.store / "tunings/t1/cases/c1/r1/case.json"),  # an unsandboxed agent's marker
            "{output}",
        ],
    }
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")], runner=runner))
    worker = fleet.start_worker(concurrency=2)
    marker = fleet.settings.store / "tunings/t1/cases/c1/r1/first-run.pid"
    await wait_until(lambda: marker.exists() and marker.read_text().strip() != "", 30, "the stubborn agent")
    worker.send_signal(signal.SIGSTOP)
    await asyncio.sleep(2 * fleet.settings.lease_s)  # the fault itself: paused past its lease
    worker.send_signal(signal.SIGCONT)
    rows = await fleet.wait_finished(1, timeout_s=60)
    assert (rows["c1"].state, rows["c1"].reason) == ("completed", None)
    events = fleet.events()
    starts = [e for e in events if e["kind"] == "case_started"]
    lost = [e for e in events if e["kind"] == "lease_lost"]
    assert len(starts) == 2 and len(lost) == 1, [e["kind"] for e in events]
    assert event_time_s(starts[1]) >= event_time_s(lost[0]), "the new try began before the old one ended"
