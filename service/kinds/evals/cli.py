"""`tunefleet eval`: evaluate a version of a tuning on the fleet, watch it, read and compare the results
(docs/evaluation.md); and `tunefleet report TUNING`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from service.cli.render import print_as
from service.cli.support import Format, FormatOption, fail, settings_of, with_client
from service.core.errors import TunefleetError
from service.core.store import Store
from service.kinds.evals import render
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.history import cli as history_cli
from service.kinds.evals.models import EvalResults
from service.kinds.evals.plan import plan
from service.kinds.evals.report import REPORT_FILE, build_report, render_report
from service.kinds.evals.split import Part
from service.kinds.evals.versions import current_main


class EvalGroup(TyperGroup):
    """`tunefleet eval TUNING ...` is `tunefleet eval run TUNING ...` (a tuning named like a subcommand
    is evaluated with `eval run NAME`)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


eval_app = typer.Typer(
    cls=EvalGroup,
    no_args_is_help=True,
    help="Evaluate a version of a tuning on its cases (`tunefleet eval TUNING`), read and compare results.",
)
EvalArg = Annotated[str, typer.Argument(help="The evaluation's id.")]


def _files(ctx: typer.Context) -> EvalFiles:
    return EvalFiles(Store(settings_of(ctx).store))


def _results(ctx: typer.Context, eval_id: str) -> EvalResults:
    """The evaluation's results, or one error line when the store does not hold it."""
    try:
        return _files(ctx).results(eval_id)
    except TunefleetError as exc:
        fail(exc)


@eval_app.command("run")
def run_eval(
    ctx: typer.Context,
    tuning: Annotated[str, typer.Argument(help="The tuning whose version is evaluated.")],
    version: Annotated[
        str, typer.Option(help="main (the current version), initial (as imported) or a commit id.")
    ] = "main",
    cases: Annotated[Path | None, typer.Option(help="A folder of cases to evaluate on.")] = None,
    split: Annotated[
        str | None,
        typer.Option(help="holdout, train or all (default: holdout when the tuning has a split, else all)."),
    ] = None,
    repeat: Annotated[int, typer.Option(help="Runs of each case (1 to 1000).")] = 1,
    name: Annotated[
        str | None, typer.Option(help="The evaluation's id (a slug); a fresh one if omitted.")
    ] = None,
) -> None:
    """Evaluate a version: one job per (case, repeat) on the fleet, graded by the analyzer, never applied."""
    if split is not None and split not in ("holdout", "train", "all"):
        fail(f"--split {split!r}: expected holdout, train or all")
    part: Part | None = split  # type: ignore[assignment]

    spec = with_client(
        ctx,
        lambda client: client.evals.create(
            tuning, version=version, cases=cases, split=part, repeats=repeat, name=name
        ),
    )
    print(
        f"eval {spec.id}: queued {spec.total} items ({len(spec.cases)} cases x {spec.repeats}) on version "
        f"{spec.version[:12]} ({spec.version_asked}), cases: {spec.source}"
    )


@eval_app.command("status")
def status(
    ctx: typer.Context,
    eval_id: Annotated[str | None, typer.Argument(help="One evaluation (read from the store).")] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Every evaluation with its progress (live counters), or one evaluation's summary."""
    store = Store(settings_of(ctx).store)
    if eval_id is not None:
        results = _results(ctx, eval_id)
        main = current_main(store.tuning(results.tuning))
        print_as(
            fmt,
            lambda: results.model_dump_json(indent=2, exclude={"cases"}),
            lambda: render.summary_tsv(results),
            lambda: render.summary_lines(results, main),
        )
        return
    found = with_client(ctx, lambda client: client.evals.progress())
    mains = {tuning: current_main(store.tuning(tuning)) for tuning in {p.head.tuning for p in found}}
    print_as(
        fmt,
        lambda: render.as_json([p.model_dump(mode="json") for p in found]),
        lambda: render.progress_tsv(found),
        lambda: render.progress_table(found, mains),
    )


@eval_app.command("show")
def show(ctx: typer.Context, eval_id: EvalArg, fmt: FormatOption = Format.table) -> None:
    """An evaluation in full: summary, mean score per rubric item, flaky cases, infrastructure failures,
    and one row per case."""
    results = _results(ctx, eval_id)
    print_as(
        fmt,
        lambda: render.detail_json(results),
        lambda: render.summary_tsv(results) + "\n" + render.cases_tsv(results),
        lambda: render.detail_view(results),
    )


@eval_app.command("results")
def results(ctx: typer.Context, eval_id: EvalArg, fmt: FormatOption = Format.table) -> None:
    """One row per case: repeats graded and passed, pass fraction, outcome (pass, fail, flaky, failed)."""
    found = _results(ctx, eval_id)
    print_as(
        fmt,
        lambda: render.as_json([row.model_dump(mode="json") for row in found.cases]),
        lambda: render.cases_tsv(found),
        lambda: render.cases_table(found),
    )


@eval_app.command("compare")
def compare(
    ctx: typer.Context,
    before: Annotated[str, typer.Argument(help="Evaluation A (before).")],
    after: Annotated[str, typer.Argument(help="Evaluation B (after).")],
    fmt: FormatOption = Format.table,
) -> None:
    """B against A: flips, the exact McNemar test, the difference of pass rates with its interval, costs."""
    try:
        comparison = _files(ctx).compare(before, after)
    except TunefleetError as exc:
        fail(exc)
    print_as(
        fmt,
        lambda: comparison.model_dump_json(indent=2),
        lambda: render.compare_tsv(comparison),
        lambda: render.compare_view(comparison),
    )


@eval_app.command("plan")
def plan_command(
    ctx: typer.Context,
    eval_id: Annotated[str, typer.Argument(help="An evaluation whose per-case pass rates to plan from.")],
    difference: Annotated[
        float, typer.Option(help="The change of pass rate to detect, as a fraction (0.05: 5 points).")
    ] = 0.05,
    power: Annotated[float, typer.Option(help="The chance of detecting it.")] = 0.8,
    alpha: Annotated[float, typer.Option(help="The test's level (two-sided).")] = 0.05,
    fmt: FormatOption = Format.table,
) -> None:
    """Cases and repeats an evaluation needs to detect a change of pass rate, from the per-case pass rates
    of EVAL_ID (docs/evaluation.md, "Planning an evaluation")."""
    found = _results(ctx, eval_id)
    rates = [row.passed / row.graded for row in found.cases if row.graded]
    try:
        made = plan(rates, difference, power, alpha)
    except ValueError as exc:
        fail(exc)
    print_as(
        fmt,
        lambda: made.model_dump_json(indent=2),
        lambda: render.plan_tsv(made),
        lambda: render.plan_view(made),
    )


@eval_app.command("cancel")
def cancel(ctx: typer.Context, eval_id: EvalArg) -> None:
    """Cancel an evaluation's unfinished items: queued ones end at once, running ones within a poll."""

    count = with_client(ctx, lambda client: client.evals.cancel(eval_id))
    print(
        f"eval {eval_id}: cancelled {count} item(s)" if count else f"eval {eval_id}: nothing left to cancel"
    )


def report(
    ctx: typer.Context,
    tuning: Annotated[str, typer.Argument(help="The tuning's name.")],
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
) -> None:
    """Print the tuning's REPORT.md: train outcomes, held-out pass rate before and after, costs."""
    store = Store(settings_of(ctx).store)
    try:
        tuning_store = store.known_tuning(tuning)
        built = build_report(tuning_store, EvalFiles(store).folder)
    except TunefleetError as exc:
        fail(exc)
    written = tuning_store.root / REPORT_FILE
    if as_json:
        print(built.model_dump_json(indent=2))
    elif written.exists() and not built.stale:  # the daemon's (a stale one is built afresh: it says so)
        print(written.read_text(), end="")
    else:
        print(render_report(built), end="")


def register(app: typer.Typer) -> None:
    """`tunefleet eval ...`, `tunefleet report TUNING` and the history (`versions`, `diff`, `why`)."""
    app.add_typer(eval_app, name="eval")
    app.command("report")(report)
    history_cli.register(app)
