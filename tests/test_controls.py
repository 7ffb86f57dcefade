"""Pause, resume and cancel: fleet-wide controls that act within one poll and lose nothing else."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from service.core import keys
from tests.support.fleet import Fleet, case, demo_adapter, event_time_s, step_starts, wait_until, write_tuning
from tests.support.redis_server import RedisServer

HANG_ONCE = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).parent.joinpath("agent.pid").write_text(str(os.getpid()))
while True:
    time.sleep(0.2)
"""


def run_starts(fleet: Fleet) -> list[dict[str, Any]]:
    return [e for e in fleet.events() if e["kind"] == "step_started" and e["step"] == "run"]


async def test_pause_stops_new_runs_within_a_poll_and_resume_restarts_them(
    fleet: Fleet, tmp_path: Path
) -> None:
    """After `pause` no run starts (past one poll) while running steps finish; `resume` lets them go on."""
    cases = [case(f"c{i}") for i in range(30)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=demo_adapter(run_ms=300)))
    fleet.start_worker(concurrency=3)
    await wait_until(lambda: len(run_starts(fleet)) >= 3, 30, "runs under way")
    async with fleet.client() as client:
        await client.pause()
        paused_at = time.time()
        status = await client.status()
        assert status.paused
    await wait_until(
        lambda: any(e["kind"] == "run_waits_for_resume" for e in fleet.events()),
        10,
        "a run start held by the pause",
    )
    held_until = time.time()
    late = [e for e in run_starts(fleet) if event_time_s(e) > paused_at + fleet.settings.poll_delay_s + 0.2]
    assert late == []
    finished_while_paused = [
        e for e in fleet.events() if e["kind"] == "step_finished" and event_time_s(e) > paused_at
    ]
    assert finished_while_paused  # steps under way were not stopped
    async with fleet.client() as client:
        await client.resume()
    rows = await fleet.wait_finished(len(cases))
    assert {r.state for r in rows.values()} == {"completed"}
    assert any(event_time_s(e) > held_until for e in run_starts(fleet))


async def test_cancelling_a_running_case_stops_its_agent_and_nothing_else(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`cancel` on a running case ends its agent process and the case `cancelled`; the other cases finish."""
    import sys

    runner = {
        "kind": "command",
        "timeout_s": 120,
        "argv": [
            sys.executable,
            "-c",
            HANG_ONCE.replace("{", "{{").replace("}", "}}"),
            str(
                fleet.settings.store / "tunings/t2/cases/stuck/r1/case.json"
            ),  # an unsandboxed agent's marker
            "{output}",
        ],
    }
    hang = write_tuning(tmp_path / "hang", [case("stuck")], name="t2", runner=runner)
    await fleet.start_tuning(hang)
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{i}") for i in range(5)]))
    fleet.start_worker()
    pid_file = fleet.settings.store / "tunings/t2/cases/stuck/r1/agent.pid"
    await wait_until(lambda: pid_file.exists() and pid_file.read_text() != "", 30, "the agent to start")
    pid = int(pid_file.read_text())
    async with fleet.client() as client:
        cancelled = await client.cancel("t2", "stuck")
    assert cancelled == ["case:t2:stuck:1"]
    await wait_until(
        lambda: fleet.results("t2")["stuck"].state == "cancelled", 15, "the case to end cancelled"
    )
    assert process_state(pid) in {"gone", "Z"}  # ended: reaped, or dead and waiting for its parent
    rows = await fleet.wait_finished(5)
    assert {r.state for r in rows.values()} == {"completed"}


async def test_cancelling_a_tuning_ends_its_queued_cases_at_once(fleet: Fleet, tmp_path: Path) -> None:
    """`cancel TUNING` with no worker running ends every queued case cancelled and empties the queue."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{i}") for i in range(4)]))
    async with fleet.client() as client:
        assert len(await client.cancel("t1")) == 4
        status = await client.status()
    assert status.tunings[0].cancelled == 4 and status.queue_depth == 0
    async with fleet.client() as client:
        assert await client.cancel("t1") == []  # nothing unfinished is left
    assert {r.state for r in fleet.results().values()} == {"cancelled"}
    assert all(not step_starts(fleet.events(), f"c{i}") for i in range(4))


def process_state(pid: int) -> str:
    """A process's state letter from /proc (R, S, Z…), or `gone` when there is no such process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone"
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


async def test_a_cancel_of_a_running_case_outlives_an_emptied_redis_before_its_worker_acts(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With its worker frozen mid-run, `cancel` writes `cancel.json` into the case's folder before it
    returns; Redis emptied, the daemon restarted and the frozen worker killed, the next worker ends the
    case `cancelled` instead of running it again (its run would take a minute)."""
    tuning = write_tuning(tmp_path / "t", [case("slow")], runner=demo_adapter(run_ms=60_000))
    daemon = fleet.start_daemon(tuning)
    await wait_until(lambda: redis_server.exists(keys.epoch()), 30, "the daemon")
    worker = fleet.start_worker()
    await wait_until(lambda: len(run_starts(fleet)) == 1, 30, "the run to start")
    worker.send_signal(signal.SIGSTOP)
    async with fleet.client() as client:
        assert await client.cancel("t1", "slow") == ["case:t1:slow:1"]
    assert (fleet.settings.store / "tunings/t1/cases/slow/r1/cancel.json").exists()
    daemon.kill()  # first: alive, it would renew its lease in the emptied Redis and bar the next one
    daemon.wait()
    with redis_server.client() as redis:
        redis.flushall()
    worker.kill()
    worker.wait()
    fleet.start_daemon(tuning)
    await wait_until(lambda: redis_server.exists(keys.epoch()), 30, "the new daemon")
    fleet.start_worker()
    ended = {"completed", "difficult", "failed", "cancelled"}
    await wait_until(lambda: fleet.results()["slow"].state in ended, 40, "the case to end")
    assert fleet.results()["slow"].state == "cancelled"
    assert len(run_starts(fleet)) == 1  # the next worker ran nothing of it
