"""A goal's limits and its cancel on a real fleet: a hung step is ended by the iteration timeout, the run
timeout or the reviewer timeout, and the goal names the limit; a cancel in any step ends the goal
`cancelled` with its reason, and the agent's process is gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from service.core import keys
from tests.support.fleet import Fleet, wait_until, write_tuning
from tests.support.goals import goal_cli, goal_dir, start_goal, trace, wait_goal_ended, write_goal

AGENT = str(Path(__file__).parent / "agents" / "goal_agent.py")


@pytest.mark.parametrize(
    ("hang", "limits", "limit"),
    [
        ("work", {"iteration_timeout_s": 2, "timeout_s": 60}, "iteration_timeout"),
        ("plan", {"iteration_timeout_s": 60, "timeout_s": 2}, "timeout"),
        ("review", {"reviewer_timeout_s": 1.5}, "reviewer_timeout"),
    ],
)
async def test_a_hung_step_is_ended_by_its_limit_and_the_goal_names_it(
    fleet: Fleet, tmp_path: Path, hang: str, limits: dict[str, float], limit: str
) -> None:
    """A step that never ends is cancelled at the sooner deadline; the goal ends incomplete naming it."""
    fleet.start_worker()
    spec = write_goal(tmp_path / "goals", limits=limits, demo={"hang": {"step": hang}, "step_ms": 0})
    began = time.monotonic()
    await start_goal(fleet, spec)
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.completion is not None
    assert (state.status, state.completion.limit) == ("incomplete", limit)
    assert f"the {hang} step of iteration 1" in state.completion.reason
    # Ended by the sooner limit, not a later one: the slack covers a worker start and a poll on two
    # cores shared with the other tests (12 s once for a 2 s limit), far below the 60 s run timeout.
    assert time.monotonic() - began < min(limits.values()) + 25


def _hanging_agent(step: str) -> dict[str, object]:
    return {
        "kind": "command",
        "argv": [sys.executable, AGENT, "{step}", "{brief}", "{output}", "{workspace}"],
        "env": {"GOAL_AGENT_HANG": step},
    }


def _pid_of(fleet: Fleet, step: str) -> int | None:
    found = sorted((goal_dir(fleet) / "iterations" / "01").glob(f"{step}-*/out/pid"))
    return int(found[0].read_text()) if found and found[0].read_text() else None


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


@pytest.mark.parametrize("step", ["plan", "work", "review"])
async def test_cancel_during_a_step_ends_the_goal_cancelled_and_its_agent(
    fleet: Fleet, tmp_path: Path, step: str
) -> None:
    """`tunefleet goal cancel` while a step's agent runs: the goal ends cancelled with its reason, the
    agent's process is gone, and no later step starts."""
    fleet.start_worker()
    agent = _hanging_agent(step)
    await start_goal(fleet, write_goal(tmp_path / "goals", runner=agent, analyzer=agent))
    await wait_until(lambda: _pid_of(fleet, step) is not None, 30, f"the {step} agent to start")
    pid = _pid_of(fleet, step)
    assert pid is not None and _alive(pid)
    cancel = goal_cli(fleet, "cancel", "g1")
    assert cancel.returncode == 0, cancel.stderr
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.completion is not None
    assert (state.status, state.completion.reason) == (
        "cancelled",
        f"cancelled by the user during the {step} step",
    )
    await wait_until(lambda: not _alive(pid), 10, "the agent process to end")
    later = {"plan": ["work", "review"], "work": ["review"], "review": []}[step]
    for other in later:
        assert not list((goal_dir(fleet) / "iterations" / "01").glob(f"{other}-*"))


async def test_a_goal_started_on_a_tuning_works_on_its_current_version(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet goal start SPEC --tuning t1`: the goal records the tuning's current version, and its
    worker's agent reads that version's files (read-only) while it edits the workspace."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    fleet.start_worker()
    agent = {
        "kind": "command",
        "argv": [sys.executable, AGENT, "{step}", "{brief}", "{output}", "{workspace}", "{system}"],
    }
    spec = write_goal(tmp_path / "goals", runner=agent, analyzer=agent)
    started = goal_cli(fleet, "start", str(spec), "--tuning", "t1")
    assert started.returncode == 0, started.stderr
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert (state.status, state.tuning) == ("completed", "t1")
    async with fleet.client() as client:
        assert state.version == (await client.redis.get(keys.version("t1"))).decode()
    changes = (goal_dir(fleet) / "iterations" / "01" / "changes.diff").read_text()
    assert "+rules.md" in changes and "+42" in changes


async def test_an_unknown_tuning_is_refused_by_name(fleet: Fleet, tmp_path: Path) -> None:
    """A goal started on a tuning the store does not hold is refused with one error line naming it."""
    spec = write_goal(tmp_path / "goals")
    started = goal_cli(fleet, "start", str(spec), "--tuning", "nope")
    assert started.returncode == 2
    assert started.stderr.strip() == "error: goal g1: field 'tuning': no tuning 'nope'"


async def test_void_steps_in_a_row_end_the_goal_failed(fleet: Fleet, tmp_path: Path) -> None:
    """A work step void max_voids times in a row is set aside each time, then the goal ends failed,
    saying so; the set-aside folders are kept."""
    fleet.start_worker()
    spec = write_goal(tmp_path / "goals", limits={"max_voids": 2}, demo={"voids": {"work": 5}, "step_ms": 0})
    await start_goal(fleet, spec)
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.completion is not None
    assert state.status == "failed"
    assert (
        state.completion.reason == "2 void work steps in a row, the last: demo: injected infrastructure fault"
    )
    assert len(list((goal_dir(fleet) / "iterations" / "01").glob("work-*.void-*"))) == 2


async def test_goal_status_shows_each_iteration_and_the_verdicts(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet goal status ID` prints one row per iteration with the review's decision and remaining
    work, then how the goal ended."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 2, "step_ms": 0}))
    await wait_goal_ended(fleet)
    shown = goal_cli(fleet, "status", "g1")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(
        line.split()[:2] == ["1", "reviewed"] and "continue the goal in iteration 2" in line for line in lines
    )
    assert any(line.split()[:2] == ["2", "reviewed"] and "complete" in line for line in lines)
    assert lines[-1].startswith("completed: the review of iteration 2")


async def test_starting_a_goal_again_carries_on_a_failed_one_and_refuses_another_spec(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A goal failed for voids and started again goes on where it failed (its voids counted afresh) and
    completes; starting it once more changes nothing; a different spec under its id is refused."""
    fleet.start_worker()
    spec = write_goal(tmp_path / "goals", limits={"max_voids": 2}, demo={"voids": {"work": 2}, "step_ms": 0})
    await start_goal(fleet, spec)
    assert (await wait_goal_ended(fleet, timeout_s=30)).status == "failed"
    again = goal_cli(fleet, "start", str(spec))
    assert (again.returncode, again.stdout.strip()) == (0, "goal g1: queued"), again.stderr
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.status == "completed"
    assert [e["kind"] for e in trace(fleet)].count("goal_failed") == 1
    assert goal_cli(fleet, "start", str(spec)).stdout.strip() == "goal g1: completed"
    other = write_goal(tmp_path / "other", goal="Something else")
    refused = goal_cli(fleet, "start", str(other))
    assert refused.returncode == 2
    assert "a different goal with this id exists" in refused.stderr
