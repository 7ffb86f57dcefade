"""A hostile worker agent cannot make the fleet read outside its step folder or break the goal: what it
did wrong becomes its work's failure, and the review and the next iteration go on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.fleet import Fleet
from tests.support.goals import goal_dir, start_goal, wait_goal_ended, write_goal

AGENT = str(Path(__file__).parent / "agents" / "goal_agent.py")


@pytest.mark.parametrize(
    ("hostile", "summary"),
    [
        ("symlink", "worker_result.json is invalid: worker_result.json is a symbolic link (not followed)"),
        ("nested-git", "the workspace could not be recorded"),
    ],
)
async def test_a_hostile_work_step_is_the_works_failure_not_the_goals(
    fleet: Fleet, tmp_path: Path, hostile: str, summary: str
) -> None:
    """A result linked to /etc/passwd is refused unread; a nested repository in the workspace is not
    committed; either way the work is recorded failed, the review runs, and the goal ends by its limit."""
    fleet.start_worker()
    agent = {
        "kind": "command",
        "argv": [sys.executable, AGENT, "{step}", "{brief}", "{output}", "{workspace}"],
        "env": {"GOAL_AGENT_HOSTILE": hostile},
    }
    spec = write_goal(tmp_path / "goals", runner=agent, analyzer=agent, limits={"max_iterations": 1})
    await start_goal(fleet, spec)
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.completion is not None
    assert (state.status, state.completion.limit) == ("incomplete", "max_iterations")
    work = state.iterations[0].work
    assert work is not None and work.result.status == "failed"
    assert work.result.summary.startswith(summary), work.result.summary
    assert work.workspace_after == work.workspace_before
    kept = (goal_dir(fleet) / "iterations" / "01" / "worker_result.json").read_text()
    assert "root:" not in kept
    assert state.iterations[0].review is not None
