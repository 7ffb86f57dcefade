"""The pieces two kinds of job share behave the same for each: a durable run's folder (goals and
evaluations), the reader of JSON lines that skips the invalid ones, and the CLI's one printer of
`--format table|tsv|json`."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.cli.render import print_as
from service.cli.support import Format
from service.core.errors import StoreError
from service.core.validation import valid_only
from service.kinds.evals.errors import UnknownEvalError
from service.kinds.evals.models import EvalCaseRef, EvalHead, EvalSpec
from service.kinds.evals.store import EvalsStore
from service.kinds.goals.errors import UnknownGoalError
from service.kinds.goals.models import GoalSpec
from service.kinds.goals.store import GoalsStore

COMMIT = "0" * 40
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _eval_spec(eval_id: str) -> EvalSpec:
    return EvalSpec(
        id=eval_id,
        tuning="t1",
        version_asked="main",
        version=COMMIT,
        source="all",
        cases=[EvalCaseRef(id="a", rev=1)],
        repeats=1,
        created_at=CREATED,
    )


def test_a_run_exists_once_its_spec_is_written_and_is_listed_by_id(tmp_path: Path) -> None:
    """A run's folder without its spec is no run (not listed, `known` refuses it with the kind's error);
    once the spec is written it is listed, in id order, and its spec reads back whole."""
    evals = EvalsStore(tmp_path / "evals")
    (tmp_path / "evals" / "half-made" / "cases").mkdir(parents=True)
    for eval_id in ("b", "a"):
        evals.eval(eval_id).write_spec(_eval_spec(eval_id))
    assert [found.run_id for found in evals.all()] == ["a", "b"]
    assert evals.known("a").spec() == _eval_spec("a")
    with pytest.raises(
        UnknownEvalError, match=re.escape(f"no evaluation 'half-made' in the store {tmp_path}")
    ):
        evals.known("half-made")


def test_each_kind_names_its_own_missing_run_and_missing_spec(tmp_path: Path) -> None:
    """A goal id the store does not hold is UnknownGoalError naming the store; a goal folder whose spec is
    gone is a StoreError naming the file; an evaluation's missing spec is an unknown evaluation."""
    goals = GoalsStore(tmp_path / "goals")
    with pytest.raises(UnknownGoalError, match=re.escape(f"no goal 'g1' in the store {tmp_path}")):
        goals.known("g1")
    with pytest.raises(StoreError, match=re.escape("GOAL_SPEC.json: the goal's spec is missing")):
        goals.goal("g1").spec()
    goals.goal("g1").write_spec(GoalSpec(id="g1", goal="write a haiku"))
    assert goals.known("g1").spec().goal == "write a haiku"
    with pytest.raises(UnknownEvalError, match="no evaluation 'e1'"):
        EvalsStore(tmp_path / "evals").eval("e1").spec()


def test_valid_only_keeps_the_valid_values_in_order() -> None:
    """A torn line, a line of another shape and an empty line are left out; the valid ones keep their
    order."""
    head = EvalHead.of(_eval_spec("e1"))
    lines = [head.model_dump_json(), '{"id": "x"', '{"other": 1}', "", head.model_dump_json()]
    assert valid_only(EvalHead, lines) == [head, head]


def test_print_as_makes_only_the_format_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """`--format tsv` writes the TSV as it is (no line break added) and never builds the table or the JSON;
    `--format json` prints the JSON with a line break."""

    def never() -> str:
        raise AssertionError("a format that was not asked for was made")

    print_as(Format.tsv, never, lambda: "a\tb\n", never)
    print_as(Format.json, lambda: '{"a": 1}', never, never)
    assert capsys.readouterr().out == 'a\tb\n{"a": 1}\n'
