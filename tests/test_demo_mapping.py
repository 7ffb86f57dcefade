"""A case's or a goal's `demo:` mapping is open in the core: only the demo agents validate its knobs,
and only `tunefleet demo` reads the outcome it declares (`demo.expect`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from service.core.models.case import Case
from service.kinds.goals.models import GoalSpec
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import RUBRIC, Fleet, case, write_tuning
from tests.support.goals import start_goal, wait_goal_ended, write_goal
from workers.adapters.demo_knobs import DemoKnobs, GoalDemoKnobs, read_knobs
from workers.errors import JobFault


def tunefleet_demo(fleet: Fleet, tuning: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`tunefleet demo` on `tuning` with one worker and no goals, as a real process; it may fail."""
    no_goals = tmp_path / "no-goals"
    no_goals.mkdir(exist_ok=True)
    demo = ["demo", "--tuning", str(tuning), "--workers", "1", "--goals", str(no_goals)]
    env = fleet_env(fleet.settings, TUNEFLEET_LOG_FORMAT="json", COLUMNS="200")
    return tunefleet(*demo, env=env, timeout_s=120)


def test_the_core_keeps_any_demo_mapping_as_written() -> None:
    """A case and a goal spec take any JSON mapping under `demo` (knobs the core does not know) and keep
    it as it was written."""
    demo = {"made_up": [1, "two"], "expect": {"anything": True}}
    the_case = Case.model_validate({"id": "c1", "input": "q", "rubric": RUBRIC, "demo": demo})
    spec = GoalSpec.model_validate({"id": "g1", "goal": "do it", "demo": demo})
    assert the_case.demo == demo and spec.demo == demo


def test_the_demo_agents_refuse_a_knob_that_is_not_one() -> None:
    """The demo agents' knobs refuse a misspelt or ill-typed knob with the owner, the field and what was
    expected, and leave `expect` to the demo command."""
    with pytest.raises(JobFault, match=r"^case c1: demo: field 'rulez': Extra inputs"):
        read_knobs(DemoKnobs, {"rulez": ["a"]}, "case c1")
    with pytest.raises(JobFault, match=r"^goal g1: demo: field 'step_ms': Input should be"):
        read_knobs(GoalDemoKnobs, {"step_ms": "slow"}, "goal g1")
    assert read_knobs(DemoKnobs, {"rules": ["a"], "expect": {"state": "any"}}, "case c1").rules == ["a"]


async def test_a_case_with_a_bad_knob_is_taken_then_ends_failed(fleet: Fleet, tmp_path: Path) -> None:
    """A case whose demo knob is misspelt is registered like any other; a demo agent ends it `failed`
    with the field as its reason, and the other cases run on."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("typo", rulez=["x"]), case("fine")]))
    fleet.start_worker(concurrency=2)
    await fleet.wait_finished(2)
    rows = fleet.results()
    assert rows["fine"].state == "completed"
    assert rows["typo"].state == "failed" and "case typo: demo: field 'rulez'" in (rows["typo"].reason or "")


async def test_a_goal_with_a_bad_knob_ends_failed_naming_it(fleet: Fleet, tmp_path: Path) -> None:
    """A goal whose demo knob is ill-typed is started like any other; the demo agent ends it `failed`
    with the field as its reason."""
    fleet.start_worker()
    await start_goal(fleet, write_goal(tmp_path / "goals", demo={"step_ms": "slow"}))
    state = await wait_goal_ended(fleet, timeout_s=30)
    assert state.status == "failed" and state.completion is not None
    assert state.completion.reason.startswith("goal g1: demo: field 'step_ms': Input should be")


async def test_the_demo_shows_each_case_beside_its_declared_outcome(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet demo` puts each case's declared outcome and whether it was met beside its result, and
    fails naming the case that missed it."""
    cases = [
        case("meets", expect={"state": "completed"}),
        case("misses", flawed=True, expect={"state": "completed"}),
    ]
    done = tunefleet_demo(fleet, write_tuning(tmp_path / "t", cases), tmp_path)
    assert done.returncode == 1, done.stderr
    results = done.stdout.split("2/2 cases finished")[1]
    cells = [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in results.splitlines()]
    rows = {row[0]: row for row in cells if row}
    assert rows["case"][-2:] == ["declared", "met"]
    assert rows["meets"][-2:] == ["completed", "yes"] and rows["misses"][-2:] == ["completed", "NO"]
    assert "1 case(s) did not reach their declared outcome: misses" in done.stdout


async def test_the_demo_refuses_a_declared_outcome_that_is_not_one(fleet: Fleet, tmp_path: Path) -> None:
    """A declared outcome that is not one stops `tunefleet demo` before anything is registered, in one
    error line naming the case file and the field."""
    tuning = write_tuning(tmp_path / "t", [case("odd", expect={"state": "great"})])
    done = tunefleet_demo(fleet, tuning, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    odd = tmp_path / "t" / "cases" / "odd.yaml"
    assert line.startswith(f"error: {odd}: demo.expect: field 'state': Input should be"), line
    assert not (fleet.settings.store / "tunings" / "t1").exists()
