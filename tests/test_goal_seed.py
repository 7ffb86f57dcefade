"""The rules of seed 002 that the goal loop keeps on a fleet: a cancel is durable (in GOAL_STATE.json at
once, through an emptied Redis and a daemon restart), what a step spends is in the goal's totals however
the step ends, the fleet itself enforces `attempts_per_task` and logs what it observed, GOAL_RESULT.md
carries the spec, each iteration's Updated time, the TODO's summary (`plan.json`) and the worker's error,
and a refused key fails a goal that has no tuning to hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.kinds.goals.state import ProgressEntry
from tests.support.fake_openai import FakeOpenAI, Scripted, Status
from tests.support.fleet import Fleet, wait_until, write_tuning
from tests.support.goals import (
    freeze_outside_goal_lock,
    goal_cli,
    goal_dir,
    goal_state,
    start_goal,
    trace,
    wait_goal_ended,
    wait_goal_shown_ended,
    write_goal,
)
from tests.support.redis_server import RedisServer

KEY_ENV = "FAKE_OPENAI_KEY"


def _started(fleet: Fleet, step: str, goal_id: str = "g1") -> bool:
    return any(e["kind"] == "step_started" and e["step"] == step for e in trace(fleet, goal_id))


async def _empty_redis_and_restart_the_daemon(
    fleet: Fleet, redis_server: RedisServer, tuning: Path, daemon: subprocess.Popen[bytes]
) -> None:
    """FLUSHALL, then a new daemon in place of `daemon`, which registers the tuning and reconciles the
    goals with the store. The old daemon goes first: alive, it would renew its lease in the emptied Redis
    and bar the new one."""
    daemon.kill()
    daemon.wait()
    with redis_server.client() as redis:
        redis.flushall()
    log = fleet.logs / "daemon.log"
    before = log.read_text().count("tuning_started")
    fleet.start_daemon(tuning)
    await wait_until(lambda: log.read_text().count("tuning_started") > before, 30, "the new daemon")


async def test_a_cancel_no_worker_saw_outlives_an_emptied_redis_and_a_daemon_restart(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """`goal cancel` of a queued goal writes it `cancelled` into GOAL_STATE.json at once; Redis emptied
    and the daemon restarted, a worker that pursues another goal never starts this one."""
    tuning = write_tuning(tmp_path / "t", [])
    daemon = fleet.start_daemon(tuning)
    await wait_until(lambda: redis_server.exists("tf:epoch"), 30, "the daemon")
    await start_goal(fleet, write_goal(tmp_path / "goals"))
    cancelled = goal_cli(fleet, "cancel", "g1")
    assert cancelled.returncode == 0, cancelled.stderr
    state = goal_state(fleet)
    assert state is not None and state.status == "cancelled"
    await _empty_redis_and_restart_the_daemon(fleet, redis_server, tuning, daemon)
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", "g2"))
    assert (await wait_goal_ended(fleet, "g2")).status == "completed"
    state = goal_state(fleet)
    assert state is not None and state.completion is not None
    assert (state.status, state.completion.reason) == ("cancelled", "cancelled before it started")
    assert state.iterations == [] and [e["kind"] for e in trace(fleet)] == ["goal_cancelled"]


async def test_a_cancel_of_a_running_goal_is_durable_before_its_worker_acts(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With its worker frozen mid-step, a cancel is in GOAL_STATE.json when `cancel` returns; Redis
    emptied, the daemon restarted and the frozen worker killed, the next worker ends the goal
    `cancelled` instead of working on (the step would otherwise run into the iteration timeout), naming
    the step the goal was at."""
    tuning = write_tuning(tmp_path / "t", [])
    daemon = fleet.start_daemon(tuning)
    await wait_until(lambda: redis_server.exists("tf:epoch"), 30, "the daemon")
    worker = fleet.start_worker()
    spec = write_goal(tmp_path / "goals", limits={"iteration_timeout_s": 8}, demo={"hang": {"step": "work"}})
    await start_goal(fleet, spec)
    await wait_until(lambda: _started(fleet, "work"), 30, "the work step to start")
    freeze_outside_goal_lock(worker, fleet)
    async with fleet.client() as client:
        assert await client.goals.cancel("g1")
    state = goal_state(fleet)
    assert state is not None and (state.cancel is not None or state.status == "cancelled")
    await _empty_redis_and_restart_the_daemon(fleet, redis_server, tuning, daemon)
    worker.kill()
    worker.wait()
    fleet.start_worker()
    state = await wait_goal_ended(fleet, timeout_s=60)
    assert state.completion is not None and state.status == "cancelled", state.completion
    assert state.completion.reason == "cancelled by the user during the work step"  # not "before it started"
    assert state.cancel is None and not _started(fleet, "review")


@pytest.mark.parametrize("way", ["timeout", "cancel"])
async def test_what_a_step_cut_short_spent_is_in_the_goals_totals(
    fleet: Fleet, tmp_path: Path, way: str
) -> None:
    """Every demo step spends 1000 tokens from its start; a work step that hangs until the iteration timeout
    ends it, or until a cancel does, has its 1000 tokens in the iteration's, the goal's and the summary's
    totals beside the plan's."""
    fleet.start_worker()
    limits = {"iteration_timeout_s": 3} if way == "timeout" else {}
    spec = write_goal(tmp_path / "goals", limits=limits, demo={"tokens": 1000, "hang": {"step": "work"}})
    await start_goal(fleet, spec)
    if way == "cancel":
        await wait_until(lambda: _started(fleet, "work"), 30, "the work step to start")
        async with fleet.client() as client:
            assert await client.goals.cancel("g1")
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.status == {"timeout": "incomplete", "cancel": "cancelled"}[way]
    assert state.spent.tokens == 2000 and state.iterations[0].spent.tokens == 2000
    await wait_goal_shown_ended(fleet)
    async with fleet.client() as client:
        [summary] = await client.goals.summaries()
    assert summary.tokens == 2000


def _fleet_log(fleet: Fleet) -> list[ProgressEntry]:
    text = (goal_dir(fleet) / "iterations" / "01" / "WORKER_PROGRESS.jsonl").read_text()
    return [ProgressEntry.model_validate_json(line) for line in text.splitlines()]


@pytest.mark.parametrize(("failures", "calls", "finished"), [(5, 3, 0), (1, 2, 2)])
async def test_the_fleet_enforces_attempts_per_task(
    fleet: Fleet, tmp_path: Path, failures: int, calls: int, finished: int
) -> None:
    """With attempts_per_task 3, tasks that keep failing get exactly three calls of the worker's agent, and
    tasks that succeed at their second attempt get two (no call once every task is finished); the
    fleet's progress log has one started and one ending line per task and attempt."""
    fleet.start_worker()
    spec = write_goal(
        tmp_path / "goals",
        limits={"attempts_per_task": 3, "max_iterations": 1},
        demo={"tasks": 2, "task_failures": failures, "complete_at": 9},
    )
    await start_goal(fleet, spec)
    state = await wait_goal_ended(fleet)
    work = state.iterations[0].work
    assert work is not None and (work.attempts, work.tasks_finished) == (calls, finished)
    started = [(e.task, e.attempt) for e in _fleet_log(fleet) if e.event == "started"]
    assert started == [(task, n) for n in range(1, calls + 1) for task in ("T1", "T2")]
    folder = next((goal_dir(fleet) / "iterations" / "01").glob("work-*"))
    assert sorted(p.name for p in folder.glob("out*")) == ["out", *[f"out-{n}" for n in range(1, calls)]]


LIAR = """
import json, pathlib, sys
step, output = sys.argv[1], pathlib.Path(sys.argv[2])
if step == "plan":
    output.write_text("- [ ] A: answer\\n")
elif step == "work":
    lines = [{"task": "A", "event": "finished", "attempt": 9}, {"task": "Z", "event": "finished"}]
    (output.parent / "progress.jsonl").write_text("".join(json.dumps(l) + "\\n" for l in lines))
    output.write_text(json.dumps({"status": "completed", "summary": "did A and Z"}))
    sys.exit(4)
else:
    output.write_text(json.dumps({"decision": "ok", "complete": True, "summary": "s", "rationale": "r"}))
"""


async def test_the_progress_log_is_what_the_fleet_observed_and_the_result_says_it_all(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A worker's agent that claims attempt 9 and a task the TODO lacks, and exits 4: the fleet's progress
    log has attempt 1 of the TODO's one task only; GOAL_RESULT.md names the spec, each iteration's Updated
    time, the worker's Error line and, from a demo planner's plan.json, the TODO's summary."""
    fleet.start_worker()
    agent = {
        "kind": "command",
        "argv": [sys.executable, "-c", LIAR.replace("{", "{{").replace("}", "}}"), "{step}", "{output}"],
    }
    await start_goal(fleet, write_goal(tmp_path / "goals", runner=agent, analyzer=agent))
    state = await wait_goal_ended(fleet)
    assert [(e.task, e.event, e.attempt) for e in _fleet_log(fleet)] == [
        ("A", "started", 1),
        ("A", "finished", 1),
    ]
    work = state.iterations[0].work
    assert work is not None and work.error is not None and "exited 4" in work.error
    text = (goal_dir(fleet) / "GOAL_RESULT.md").read_text()
    assert f"Spec: {goal_dir(fleet) / 'GOAL_SPEC.json'}" in text
    assert f"Updated: {state.iterations[0].updated_at.isoformat()}" in text
    assert f"Error: {work.error}" in text
    await start_goal(fleet, write_goal(tmp_path / "goals", "g2", demo={"tasks": 3}))
    await wait_goal_ended(fleet, "g2")
    demo = (goal_dir(fleet, "g2") / "GOAL_RESULT.md").read_text()
    assert "Summary: 3 tasks towards: Finish g2" in demo.split("### TODO", 1)[1]


async def test_a_refused_key_fails_a_goal_that_has_no_tuning_to_hold(fleet: Fleet, tmp_path: Path) -> None:
    """With no tuning there is nothing to hold: a goal whose planner's key is refused ends `failed`, naming
    the refusal, and asks its provider nothing more."""

    def refuse(body: dict[str, Any]) -> Scripted:
        return Status(401, message="invalid api key")

    with FakeOpenAI(responder=refuse) as server:
        llm = {
            "kind": "llm",
            "base_url": server.base_url,
            "model": "m",
            "api_key_env": KEY_ENV,
            "max_retries": 0,
        }
        fleet.start_worker(2, **{KEY_ENV: "sk-goal-seed-0b2c"})
        await start_goal(fleet, write_goal(tmp_path / "goals", analyzer=llm))
        state = await wait_goal_ended(fleet)
    assert state.completion is not None and state.status == "failed"
    assert "refused" in state.completion.reason and "no tuning to hold" in state.completion.reason
    assert len(server.requests) == 1
