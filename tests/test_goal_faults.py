"""Goals under faults: a worker SIGKILLed between two steps hands the goal to another worker with no
step run twice, a worker paused past its lease cannot write over the new owner, and a Redis that
restarts empty gets the goal back from the store (also a failed goal started again before any worker
took it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.core import keys
from service.core.models.jobs import GoalJob
from service.core.settings import FleetSettings
from service.kinds.goals.store import LOCK_FILE
from tests.support.fleet import Fleet, wait_until, write_tuning
from tests.support.goals import (
    agent_starts,
    freeze_outside_goal_lock,
    frozen_lock_holder,
    goal_cli,
    goal_dir,
    goal_state,
    start_goal,
    trace,
    wait_goal_ended,
    write_goal,
)
from tests.support.redis_server import RedisServer

EVERY_STEP_ONCE = {(i, s): 1 for i in (1, 2) for s in ("plan", "work", "review")}


def _started(fleet: Fleet, iteration: int, step: str, goal_id: str = "g1") -> bool:
    return any(
        e["kind"] == "step_started" and (e["iteration"], e["step"]) == (iteration, step)
        for e in trace(fleet, goal_id)
    )


def _waiting(fleet: Fleet) -> bool:
    return any(e["kind"] == "step_waits_for_resume" for e in trace(fleet))


@pytest.mark.parametrize(
    ("iteration", "step"),
    [(1, "plan"), (1, "work"), (1, "review")],
    ids=["plan|work", "work|review", "review|plan"],
)
async def test_a_worker_killed_between_two_steps_hands_the_goal_on_with_no_step_run_twice(
    fleet: Fleet, tmp_path: Path, iteration: int, step: str
) -> None:
    """The fleet is paused while a step runs, so the worker stops right after it (the step recorded, the
    next not started); SIGKILL it, resume with another worker: every agent starts once, the trace has
    each event once, and the goal completes."""
    first = fleet.start_worker()
    spec = write_goal(tmp_path / "goals", demo={"complete_at": 2, "step_ms": 800})
    await start_goal(fleet, spec)
    await wait_until(lambda: _started(fleet, iteration, step), 30, f"the {step} step to start")
    async with fleet.client() as client:
        await client.pause()
        await wait_until(lambda: _waiting(fleet), 30, "the goal to wait between two steps")
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = fleet.start_worker()
        await client.resume()
    state = await wait_goal_ended(fleet, timeout_s=60)
    assert state.status == "completed"
    assert agent_starts(fleet) == EVERY_STEP_ONCE
    events = trace(fleet)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finished = [(e["iteration"], e["step"]) for e in events if e["kind"] == "step_finished"]
    assert sorted(finished) == sorted(EVERY_STEP_ONCE)
    resumed = [e for e in events if e["kind"] == "goal_resumed"]
    assert len(resumed) == 1 and resumed[0]["worker"].endswith(f":{second.pid}")


@contextlib.contextmanager
def emptiable_fleet(settings: FleetSettings, tmp_path: Path) -> Iterator[tuple[RedisServer, Fleet]]:
    """A fleet on a Redis of its own, without persistence: `server.restart()` empties it."""
    server = RedisServer(tmp_path / "own-redis", appendonly=False)
    server.start()
    fleet = Fleet(settings.model_copy(update={"redis_url": server.url}), tmp_path / "fleet-logs")
    try:
        yield server, fleet
    finally:
        fleet.teardown()
        server.stop()


async def test_an_emptied_redis_gets_the_goal_back_from_the_store(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """Mid-goal, Redis restarts with nothing: the daemon restores the goal from the store, a worker carries
    it on at its first missing step, and it completes with every step recorded once."""
    with emptiable_fleet(settings, tmp_path) as (server, fleet):
        fleet.start_daemon(write_tuning(tmp_path / "t", []))
        await wait_until(lambda: server.exists("tf:epoch"), 30, "the daemon")
        fleet.start_worker()
        await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 2, "step_ms": 600}))
        await wait_until(lambda: _started(fleet, 1, "review"), 30, "the first review to start")
        server.restart()
        state = await wait_goal_ended(fleet, timeout_s=90)
    assert state.status == "completed"
    assert "redis_state_lost" in (tmp_path / "fleet-logs" / "daemon.log").read_text()
    finished = [(e["iteration"], e["step"]) for e in trace(fleet) if e["kind"] == "step_finished"]
    assert sorted(finished) == sorted(EVERY_STEP_ONCE)


async def test_a_failed_goal_started_again_is_queued_in_the_store_and_outlives_an_emptied_redis(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """A goal that failed and is started again while no worker runs is `queued` in its GOAL_STATE.json at
    once (as `goal status` shows it); Redis then restarts with nothing, and the daemon puts the goal back
    in the queue from the store: a worker carries it on and it completes."""
    with emptiable_fleet(settings, tmp_path) as (server, fleet):
        worker = fleet.start_worker()
        spec = write_goal(
            tmp_path / "goals", limits={"max_voids": 2}, demo={"voids": {"work": 2}, "step_ms": 0}
        )
        await start_goal(fleet, spec)
        assert (await wait_goal_ended(fleet, timeout_s=30)).status == "failed"
        worker.terminate()
        assert worker.wait(timeout=30) == 0
        again = goal_cli(fleet, "start", str(spec))
        assert (again.returncode, again.stdout.strip()) == (0, "goal g1: queued"), again.stderr
        state = goal_state(fleet)
        assert state is not None and (state.status, state.completion) == ("queued", None)
        assert goal_cli(fleet, "status", "g1").stdout.splitlines()[-1].startswith("queued, until ")
        server.restart()
        fleet.start_daemon(write_tuning(tmp_path / "t", []))
        fleet.start_worker()
        ended = await wait_goal_ended(fleet, timeout_s=60)
    assert ended.status == "completed"
    assert [e["kind"] for e in trace(fleet)].count("goal_failed") == 1


async def test_sigterm_mid_step_hands_the_goal_back_and_another_worker_finishes_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    """SIGTERM while the work step runs: the worker ends its step, hands the goal back and exits; another
    worker runs that step again (only that one) and completes the goal."""
    first = fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"step_ms": 1500}))
    # the agent's own start (its step folder), not the step's event, which is written just before it
    await wait_until(lambda: agent_starts(fleet).get((1, "work")) == 1, 30, "the work agent to start")
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=fleet.settings.stop_grace_s + 10) == 0
    fleet.start_worker()
    state = await wait_goal_ended(fleet, timeout_s=60)
    assert state.status == "completed"
    assert agent_starts(fleet) == {(1, "plan"): 1, (1, "work"): 2, (1, "review"): 1}
    finished = [(e["iteration"], e["step"]) for e in trace(fleet) if e["kind"] == "step_finished"]
    assert sorted(finished) == [(1, "plan"), (1, "review"), (1, "work")]


async def test_a_goal_whose_lock_a_frozen_process_holds_is_handed_back_while_the_other_jobs_go_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A process frozen while it held a goal's lock (SIGSTOP) keeps it: the worker waits for that lock in a
    thread, so its other goal goes on and loses no lease; once the wait runs out it hands the goal back
    (`goal_requeued`, naming the lock file), not failed, and the goal completes once the holder is gone.
    The step whose state write was refused runs again, and what both of its runs spent is in the totals:
    1000 tokens for every agent started."""
    worker = fleet.start_worker(TUNEFLEET_GOAL_LOCK_WAIT_S="0.5")
    held = write_goal(tmp_path / "goals", "g1", demo={"complete_at": 1, "step_ms": 400, "tokens": 1000})
    beside = write_goal(tmp_path / "goals", "g2", demo={"complete_at": 2, "step_ms": 800})
    await start_goal(fleet, held)
    await wait_until(lambda: _started(fleet, 1, "plan"), 30, "g1's plan step to start")
    with frozen_lock_holder(goal_dir(fleet, "g1") / LOCK_FILE):  # taken between two of the worker's writes
        await start_goal(fleet, beside)
        await wait_until(lambda: "goal_requeued" in fleet.log_of(0), 30, "g1 to be handed back")
        assert (await wait_goal_ended(fleet, "g2", timeout_s=60)).status == "completed"
        waiting = goal_state(fleet, "g1")
        assert waiting is not None and waiting.status == "running"
    state = await wait_goal_ended(fleet, "g1", timeout_s=60)
    assert state.status == "completed"
    started = sum(agent_starts(fleet, "g1").values())
    assert started > 3 and state.spent.tokens == 1000 * started
    lines = [json.loads(line) for line in fleet.log_of(0).splitlines() if line.startswith("{")]
    busy = [line for line in lines if line["event"] == "job_files_busy"]
    assert busy and all(line["goal"] == "g1" and LOCK_FILE in line["error"] for line in busy)
    assert not [line for line in lines if line["event"] == "lease_lost"]
    assert agent_starts(fleet, "g2") == EVERY_STEP_ONCE
    assert worker.poll() is None


async def test_a_load_that_waits_past_the_lease_for_the_goals_lock_keeps_its_lease(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A goal's first load waits for its lock (held by a frozen process) for longer than the lease: the
    lease's heartbeat runs beside the load, so the lease outlives its time to live with the worker's
    token all along; once the holder is gone the goal completes on that one lease, every step run once,
    and no lease is lost."""
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 1, "step_ms": 50}))
    lock_file = goal_dir(fleet) / LOCK_FILE
    lock_file.touch()
    lease_key = keys.lease(GoalJob(goal="g1").job_id)
    with redis.Redis.from_url(fleet.settings.redis_url) as r, frozen_lock_holder(lock_file):
        fleet.start_worker()
        await wait_until(lambda: r.get(lease_key) is not None, 30, "the worker to take the goal's lease")
        token = r.get(lease_key)
        held_until = time.monotonic() + 2 * fleet.settings.lease_s
        while time.monotonic() < held_until:  # the load still waits for the lock: the lease must live on
            assert r.get(lease_key) == token, "the lease lapsed while the goal's load waited for its lock"
            await asyncio.sleep(0.05)
        assert goal_state(fleet) is None  # the load was waiting all along (its state is made under the lock)
    state = await wait_goal_ended(fleet, timeout_s=60)
    assert state.status == "completed"
    assert agent_starts(fleet) == {(1, "plan"): 1, (1, "work"): 1, (1, "review"): 1}
    lines = [json.loads(line) for line in fleet.log_of(0).splitlines() if line.startswith("{")]
    assert not [line for line in lines if line["event"] in ("lease_lost", "job_held_elsewhere")]


async def test_a_worker_paused_past_its_lease_cannot_write_over_the_goals_new_owner(
    fleet: Fleet, tmp_path: Path
) -> None:
    """SIGSTOP during the work step (outside the goal's lock) past the lease: another worker takes the goal
    and runs that step again. Thawed, the late worker's write of the step is refused (its lease is gone):
    every step is finished once in the trace, the work step by the new owner, the goal completes, and
    what both runs of the work step spent is in the totals (1000 tokens for every agent started)."""
    paused = fleet.start_worker()
    spec = write_goal(tmp_path / "goals", demo={"complete_at": 1, "step_ms": 1500, "tokens": 1000})
    await start_goal(fleet, spec)
    await wait_until(lambda: agent_starts(fleet).get((1, "work")) == 1, 30, "the work agent to start")
    freeze_outside_goal_lock(paused, fleet)
    owner = fleet.start_worker()
    await wait_until(lambda: agent_starts(fleet).get((1, "work")) == 2, 30, "the new owner's work agent")
    paused.send_signal(signal.SIGCONT)
    await wait_until(lambda: "lease_lost" in fleet.log_of(0), 30, "the late worker to find its lease gone")
    state = await wait_goal_ended(fleet, timeout_s=60)
    assert state.status == "completed"
    finished = [e for e in trace(fleet) if e["kind"] == "step_finished"]
    assert sorted((e["iteration"], e["step"]) for e in finished) == [(1, "plan"), (1, "review"), (1, "work")]
    assert all(e["worker"].endswith(f":{owner.pid}") for e in finished if e["step"] != "plan")
    assert agent_starts(fleet) == {(1, "plan"): 1, (1, "work"): 2, (1, "review"): 1}
    assert state.spent.tokens == 1000 * 4
    assert paused.poll() is None  # the late worker lost one job, not its life
