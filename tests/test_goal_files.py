"""The files a goal keeps: GOAL_STATE.json is always whole and valid, the trace never repeats an event
(a torn last line included), and GOAL_RESULT.md has its limits and one section per iteration."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.core.models.events import EventKind
from service.kinds.goals.errors import GoalBusyError
from service.kinds.goals.models import GoalLimits
from service.kinds.goals.state import GoalState, TraceEvent
from service.kinds.goals.store import LOCK_FILE, GoalStore
from tests.support.fleet import Fleet
from tests.support.goals import frozen_lock_holder, goal_dir, start_goal, trace, wait_goal_ended, write_goal


async def test_goal_state_is_always_whole_and_valid_while_the_goal_runs(fleet: Fleet, tmp_path: Path) -> None:
    """A reader that parses GOAL_STATE.json without pause through a three-iteration goal never sees a
    partial or invalid file."""
    path = goal_dir(fleet) / "GOAL_STATE.json"
    stop = threading.Event()
    reads: list[int] = []
    bad: list[str] = []

    def read() -> None:
        while not stop.is_set():
            try:
                GoalState.model_validate_json(path.read_bytes())
                reads.append(1)
            except FileNotFoundError:
                continue
            except ValidationError as exc:
                bad.append(str(exc))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        fleet.start_worker()
        await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 3, "step_ms": 20}))
        state = await wait_goal_ended(fleet)
    finally:
        stop.set()
        reader.join()
    assert state.status == "completed"
    assert bad == []
    assert len(reads) > 50


async def test_goal_result_has_the_limits_then_one_section_per_iteration(
    fleet: Fleet, tmp_path: Path
) -> None:
    """GOAL_RESULT.md begins with the limits and holds one section per iteration, in order, each with its
    TODO, worker result and review, then the outcome."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"complete_at": 3, "step_ms": 10}))
    await wait_goal_ended(fleet)
    text = (goal_dir(fleet) / "GOAL_RESULT.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Limits", "## Iteration 1", "## Iteration 2", "## Iteration 3", "## Outcome"]
    for n in (1, 2, 3):
        section = text.split(f"## Iteration {n}\n", 1)[1].split("\n## ", 1)[0]
        assert "### TODO" in section and "### Worker result" in section and "### Review" in section
    assert "- Minimum iterations before completion: 1" in text
    assert [e["kind"] for e in trace(fleet)].count("goal_completed") == 1


def _state(events: int) -> GoalState:
    now = datetime.now(UTC)
    limits = GoalLimits(
        min_iterations=1,
        max_iterations=2,
        timeout_s=60,
        iteration_timeout_s=30,
        reviewer_timeout_s=10,
        attempts_per_task=1,
        max_voids=3,
    )
    return GoalState(
        goal_id="g1",
        goal="g",
        status="running",
        limits=limits,
        started_at=now,
        updated_at=now,
        deadline_at=now + timedelta(seconds=60),
        trace=[TraceEvent(seq=n, at=now, kind=EventKind.ITERATION_STARTED) for n in range(1, events + 1)],
    )


def test_the_trace_appends_only_the_events_it_lacks_and_cuts_a_torn_line(tmp_path: Path) -> None:
    """Saving again after a crash between the state and the trace writes appends the missing events once;
    a torn last line (a crash mid-append) is cut and written whole."""
    store = GoalStore(tmp_path / "g1")
    store.save(_state(3))
    store.save(_state(3))
    assert [line.count('"seq"') for line in store.trace_file.read_text().splitlines()] == [1, 1, 1]
    with store.trace_file.open("ab") as torn:
        torn.write(b'{"seq": 4, "at": "20')
    store.save(_state(5))
    seqs = [TraceEvent.model_validate_json(line).seq for line in store.trace_file.read_text().splitlines()]
    assert seqs == [1, 2, 3, 4, 5]


def test_a_goal_lock_held_by_a_frozen_process_is_given_up_after_its_wait(tmp_path: Path) -> None:
    """A process that took a goal's lock and was frozen (SIGSTOP) keeps it: the next writer (a `cancel`, a
    worker's save) gives up after its wait with GoalBusyError naming the lock file, instead of waiting with
    no end; once the holder is gone, the lock is taken at once."""
    store = GoalStore(tmp_path / "g1")
    with store.locked():  # the folder and its lock file exist
        pass
    with frozen_lock_holder(tmp_path / "g1" / LOCK_FILE):
        busy = r"\.lock: held by another process for more than 0\.2 s"
        with pytest.raises(GoalBusyError, match=busy), store.locked(wait_s=0.2):
            raise AssertionError("the lock was taken while the frozen process held it")
    with store.locked(wait_s=0.0):
        pass
