"""The goal loop on a real fleet, one rule per test: plan → work → review, the iteration limits, the
timeouts, an invalid TODO, the remaining work, and the files a goal keeps."""

from __future__ import annotations

from pathlib import Path

from tests.support.fleet import Fleet
from tests.support.goals import agent_starts, goal_dir, start_goal, trace, wait_goal_ended, write_goal


async def test_plan_work_review_completes_the_goal(fleet: Fleet, tmp_path: Path) -> None:
    """One iteration plans a TODO, works it in the workspace and a complete review ends it `completed`."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"tasks": 3}))
    state = await wait_goal_ended(fleet)
    assert (state.status, len(state.iterations)) == ("completed", 1)
    it = state.iterations[0]
    assert it.plan is not None and [t.id for t in it.plan.tasks] == ["T1", "T2", "T3"]
    assert it.work is not None and it.work.tasks_finished == 3 and it.work.result.status == "completed"
    assert it.work.workspace_after != it.work.workspace_before
    assert it.review is not None and it.review.review.complete
    folder = goal_dir(fleet) / "iterations" / "01"
    assert "tasks/01-T1.md" in (folder / "changes.diff").read_text()
    assert agent_starts(fleet) == {(1, "plan"): 1, (1, "work"): 1, (1, "review"): 1}


async def test_a_complete_review_before_min_iterations_does_not_complete(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A review that says complete in iteration 1 of min_iterations 2 lets the goal go on to iteration 2."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", limits={"min_iterations": 2}))
    state = await wait_goal_ended(fleet)
    assert (state.status, len(state.iterations)) == ("completed", 2)
    assert state.iterations[0].review is not None and state.iterations[0].review.review.complete
    assert [e["kind"] for e in trace(fleet)].count("review_complete_too_early") == 1


async def test_max_iterations_ends_the_goal_incomplete(fleet: Fleet, tmp_path: Path) -> None:
    """Reviews that never complete stop at max_iterations with the goal `incomplete`, naming the limit."""
    fleet.start_worker()
    spec = write_goal(tmp_path / "goals", limits={"max_iterations": 2}, demo={"complete_at": 9})
    await start_goal(fleet, spec)
    state = await wait_goal_ended(fleet)
    assert state.completion is not None
    assert (state.status, state.completion.limit, len(state.iterations)) == (
        "incomplete",
        "max_iterations",
        2,
    )


async def test_remaining_work_reaches_the_next_plan(fleet: Fleet, tmp_path: Path) -> None:
    """The remaining work of iteration 1's review is in iteration 2's brief and TODO."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 2}))
    state = await wait_goal_ended(fleet)
    first = state.iterations[0].review
    assert first is not None and first.review.remaining_work == ["continue the goal in iteration 2"]
    todo = (goal_dir(fleet) / "iterations" / "02" / "TODO.md").read_text()
    assert "- [ ] T1: continue the goal in iteration 2" in todo


async def test_an_invalid_todo_fails_the_iteration_and_the_next_plans_again(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A TODO with no task is recorded as iteration 1's failure naming the problem; iteration 2 plans
    again and completes."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"invalid_todo": [1], "complete_at": 2}))
    state = await wait_goal_ended(fleet)
    first, second = state.iterations
    assert first.status == "failed" and first.work is None
    assert first.error is not None and "no tasks" in first.error
    assert second.plan is not None and second.plan.error is None
    assert state.status == "completed"
