"""Resume: a worker killed between two steps leaves a case that another worker finishes with no
recorded step run twice."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.fleet import (
    Fleet,
    case,
    demo_adapter,
    step_finishes,
    step_starts,
    wait_until,
    write_tuning,
)

SLOW = demo_adapter(run_ms=800, analyze_ms=800, apply_ms=800)


@pytest.mark.parametrize("after", ["run", "analyze", "apply"])
async def test_a_case_resumes_after_its_worker_is_killed_between_steps(
    fleet: Fleet, tmp_path: Path, after: str
) -> None:
    """SIGKILL right after a step is recorded: the next worker carries on at the next step; no step
    whose result was recorded runs again, and the attempt folders are those of an undisturbed case."""
    tuning = write_tuning(tmp_path / "tuning", [case("c1", rules=["c1-a"])], adapter=SLOW)
    await fleet.start_tuning(tuning)
    first = fleet.start_worker(concurrency=1)
    await wait_until(
        lambda: step_finishes(fleet.events(), "c1").get(("nomem", 1, after), 0) == 1,
        30,
        f"the first {after} to be recorded",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    fleet.start_worker(concurrency=1)
    rows = await fleet.wait_finished(1, timeout_s=60)
    assert (rows["c1"].state, rows["c1"].reason) == ("completed", None)

    finishes = step_finishes(fleet.events(), "c1")
    assert all(n == 1 for n in finishes.values()), finishes
    assert set(finishes) == {
        ("nomem", 1, "run"),
        ("nomem", 1, "analyze"),
        ("nomem", 1, "apply"),
        ("nomem", 2, "run"),
        ("nomem", 2, "analyze"),
        ("mem", 1, "run"),
        ("mem", 1, "analyze"),
    }
    starts = step_starts(fleet.events(), "c1")
    # The step that was killed half-way started twice; every step recorded before the kill started once.
    order = ["run", "analyze", "apply"]
    for step in order[: order.index(after) + 1]:
        assert starts[("nomem", 1, step)] == 1
    attempt_root = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1"
    assert sorted(p.name for p in (attempt_root / "nomem").iterdir()) == ["1", "2"]
    assert sorted(p.name for p in (attempt_root / "mem").iterdir()) == ["1"]
