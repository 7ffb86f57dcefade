"""The demo's goals: start the example goals beside the demo tuning, show them live, and compare each
with the outcome it declares (`demo.expect` in its spec, read here only)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from rich.table import Table

from service.core.errors import ConfigError
from service.core.validation import describe_validation
from service.kinds.goals.fleet import GoalFiles, Goals
from service.kinds.goals.models import FINAL_STATUSES, GoalSpec, Limit
from service.kinds.goals.spec import load_goal_file
from service.kinds.goals.state import GoalState, GoalSummary

GOAL_SUFFIXES = (".yaml", ".yml", ".json")


class GoalExpectation(BaseModel):
    """A demo goal's `demo.expect`: the outcome it is built to reach, shown beside the real one."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "incomplete", "failed", "cancelled"]
    limit: Limit | None = None


def expectation(spec: GoalSpec, source: str | Path | None = None) -> GoalExpectation | None:
    """The outcome `spec` declares, if it declares one; ConfigError naming `source` (the spec's file, else
    the goal) and the field when it is not one."""
    declared = spec.demo.get("expect")
    if declared is None:
        return None
    try:
        return GoalExpectation.model_validate(declared)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, f"{source or f'goal {spec.id}'}: demo.expect")) from None


def example_specs(folder: Path) -> list[GoalSpec]:
    """The goal specs in `folder`, by file name (none when it does not exist), each with a valid
    expectation if it declares one."""
    if not folder.is_dir():
        return []
    specs = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in GOAL_SUFFIXES):
        spec = load_goal_file(path)
        expectation(spec, path)
        specs.append(spec)
    return specs


async def start_examples(goals: Goals, specs: list[GoalSpec]) -> None:
    for spec in specs:
        await goals.start(spec)


def goals_ended(summaries: list[GoalSummary], specs: list[GoalSpec]) -> int:
    wanted = {spec.id for spec in specs}
    return sum(1 for s in summaries if s.id in wanted and s.status in FINAL_STATUSES)


def live_table(summaries: list[GoalSummary]) -> Table:
    table = Table("goal", "status", "iteration", "step", "worker", title="goals", title_justify="left")
    for s in summaries:
        table.add_row(s.id, s.status, str(s.iteration), s.step or "", s.worker or "")
    return table


def met(spec: GoalSpec, state: GoalState | None) -> bool:
    expect = expectation(spec)
    if expect is None:
        return True
    if state is None or state.status != expect.status:
        return False
    limit = state.completion.limit if state.completion else None
    return expect.limit is None or expect.limit == limit


def results_table(files: GoalFiles, specs: list[GoalSpec]) -> tuple[Table, list[str]]:
    """One row per example goal (its outcome beside the declared one); the ids that missed it."""
    table = Table(
        "goal", "status", "limit", "iterations", "expected", "met", title="goals", title_justify="left"
    )
    missed = []
    for spec in specs:
        state = files.state(spec.id)
        ok = met(spec, state)
        if not ok:
            missed.append(spec.id)
        expect = expectation(spec)
        expected = f"{expect.status} {expect.limit or ''}".strip() if expect else ""
        limit = state.completion.limit if state and state.completion else None
        table.add_row(
            spec.id,
            state.status if state else "queued",
            limit or "",
            str(len(state.iterations)) if state else "0",
            expected,
            "yes" if ok else "NO",
        )
    return table, missed
