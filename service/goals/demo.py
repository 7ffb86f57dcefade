"""The demo's goals: start the example goals beside the demo tuning, show them live, and compare each
with the outcome it declares (`expect`)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from service.core.models.goal import FINAL_STATUSES, GoalSpec
from service.core.models.goal_state import GoalState, GoalSummary
from service.goals.fleet import GoalFiles, Goals
from service.goals.spec import load_goal_file

GOAL_SUFFIXES = (".yaml", ".yml", ".json")


def example_specs(folder: Path) -> list[GoalSpec]:
    """The goal specs in `folder`, by file name (none when it does not exist)."""
    if not folder.is_dir():
        return []
    return [load_goal_file(p) for p in sorted(folder.iterdir()) if p.suffix in GOAL_SUFFIXES]


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
    if spec.expect is None:
        return True
    if state is None or state.status != spec.expect.status:
        return False
    limit = state.completion.limit if state.completion else None
    return spec.expect.limit is None or spec.expect.limit == limit


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
        expected = f"{spec.expect.status} {spec.expect.limit or ''}".strip() if spec.expect else ""
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
