"""`tunefleet goal`: start, watch, read and cancel goal runs (docs/goals.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from service.cli.render import out_console
from service.cli.support import fail, settings_of, with_client
from service.core.errors import TunefleetError
from service.core.store import Store
from service.kinds.goals.fleet import GoalFiles
from service.kinds.goals.state import GoalState

goal_app = typer.Typer(no_args_is_help=True, help="Pursue goals: plan, work and review in iterations.")


@goal_app.command("start")
def start(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="The goal's spec (YAML or JSON).")],
    tuning: Annotated[
        str | None, typer.Option(help="Run against this tuning's current system version and agents.")
    ] = None,
) -> None:
    """Start a goal (or carry on one that failed); a worker takes it from the queue."""

    summary = with_client(ctx, lambda client: client.goals.start_file(spec, tuning))
    out_console().print(f"goal {summary.id}: {summary.status}", highlight=False, markup=False)


@goal_app.command("status")
def status(
    ctx: typer.Context,
    goal: Annotated[str | None, typer.Argument(help="One goal's full state (GOAL_STATE.json).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every goal (status, iteration, step, worker), or one goal's state."""

    if goal is not None:
        try:
            state = GoalFiles(Store(settings_of(ctx).store)).state(goal)
        except TunefleetError as exc:
            fail(exc)
        if state is None:
            fail(f"goal {goal!r} is queued: no worker has started it yet")
        if as_json:
            print(state.model_dump_json(indent=2))
            return
        out_console().print(iterations_table(state), markup=False, highlight=False)
        if state.completion is not None:
            limit = f" (limit: {state.completion.limit})" if state.completion.limit else ""
            print(f"{state.status}: {state.completion.reason}{limit}")
        else:
            print(f"{state.status}, until {state.deadline_at.isoformat(timespec='seconds')} at the latest")
        return
    found = with_client(ctx, lambda client: client.goals.summaries())
    if as_json:
        print(json.dumps([s.model_dump(mode="json") for s in found], indent=2))
        return
    table = Table("goal", "status", "iteration", "step", "worker", "reason", box=None)
    for s in found:
        table.add_row(s.id, s.status, str(s.iteration), s.step or "", s.worker or "", s.reason or "")
    out_console().print(table, markup=False, highlight=False)


def iterations_table(state: GoalState) -> Table:
    """One row per iteration: its status, TODO, worker result and the reviewer's verdict."""
    table = Table("iteration", "status", "tasks", "worker", "review", "complete", "remaining work", box=None)
    table.title = f"goal {state.goal_id}: {state.goal}"
    for it in state.iterations:
        tasks = str(len(it.plan.tasks)) if it.plan and it.plan.error is None else ""
        work = f"{it.work.result.status}: {it.work.tasks_finished} finished" if it.work else ""
        review = it.review.review if it.review else None
        table.add_row(
            str(it.iteration),
            it.status if it.error is None else f"{it.status}: {it.error}",
            tasks,
            work,
            review.decision if review else "",
            ("yes" if review.complete else "no") if review else "",
            "; ".join(review.remaining_work) if review else "",
        )
    return table


@goal_app.command("show")
def show(ctx: typer.Context, goal: Annotated[str, typer.Argument(help="The goal's id.")]) -> None:
    """Print the goal's GOAL_RESULT.md: its limits and one section per iteration."""

    try:
        print(GoalFiles(Store(settings_of(ctx).store)).result_markdown(goal), end="")
    except TunefleetError as exc:
        fail(exc)


@goal_app.command("cancel")
def cancel(ctx: typer.Context, goal: Annotated[str, typer.Argument(help="The goal's id.")]) -> None:
    """Cancel a goal: the step under way stops within a poll and the goal ends `cancelled`."""

    if not with_client(ctx, lambda client: client.goals.cancel(goal)):
        fail(f"goal {goal!r} has ended already: nothing to cancel")
    print(f"goal {goal}: cancelling")


def register(app: typer.Typer) -> None:
    """The goal commands, under `tunefleet goal` (service.core.kinds: the CLI takes every kind's `cli`)."""
    app.add_typer(goal_app, name="goal")
