"""`tunefleet versions TUNING`, `tunefleet diff TUNING A B` and `tunefleet why TUNING VERSION`: a tuning's
history read from the store (no Redis needed: `main` is the repository's mirror of the current version);
`tunefleet approve|reject TUNING CANDIDATE`: a person's decision on a waiting candidate, kept in the store."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from service.cli.render import out_console, print_as
from service.cli.support import Format, FormatOption, TuningArg, fail, settings_of
from service.core.errors import TunefleetError
from service.core.store import Store
from service.kinds.evals.approval import Verdict, decide
from service.kinds.evals.history import render
from service.kinds.evals.history.views import VersionViews

T = TypeVar("T")
VersionArg = Annotated[
    str, typer.Argument(help="initial, main, or the start of a version's or candidate's id.")
]


def _read(ctx: typer.Context, read: Callable[[VersionViews], T]) -> T:
    try:
        return read(VersionViews(Store(settings_of(ctx).store)))
    except TunefleetError as exc:
        fail(exc)


def versions(ctx: typer.Context, tuning: TuningArg, fmt: FormatOption = Format.table) -> None:
    """Every published version and rejected candidate: when, the case and try, the applier's summary, lines
    added and removed, size in tokens, the gate's verdict and figures, and every evaluation's pass rate."""
    found = _read(ctx, lambda views: views.versions(tuning))
    print_as(
        fmt,
        lambda: found.model_dump_json(indent=2),
        lambda: render.versions_tsv(found),
        lambda: render.versions_table(found),
    )


def diff(
    ctx: typer.Context,
    tuning: TuningArg,
    a: VersionArg,
    b: VersionArg,
    as_json: Annotated[bool, typer.Option("--json", help="The diff as JSON.")] = False,
) -> None:
    """The changes from version A to version B (coloured on a terminal)."""
    found = _read(ctx, lambda views: views.diff(tuning, a, b))
    if as_json:
        print(found.model_dump_json(indent=2))
    elif sys.stdout.isatty():
        out_console().print(render.diff_text(found), end="")
    else:
        sys.stdout.write(render.diff_text(found).plain)


def why(ctx: typer.Context, tuning: TuningArg, version: VersionArg, fmt: FormatOption = Format.table) -> None:
    """The feedback and analysis that asked for a version, and the gate's evidence on it."""
    found = _read(ctx, lambda views: views.why(tuning, version))
    print_as(
        fmt,
        lambda: found.model_dump_json(indent=2),
        lambda: render.why_tsv(found),
        lambda: render.why_view(found),
    )


NoteOption = Annotated[str, typer.Option("--note", help="Why, kept with the decision.")]
CandidateArg = Annotated[str, typer.Argument(help="The waiting candidate: the start of its id.")]


def _decide(ctx: typer.Context, tuning: str, candidate: str, verdict: Verdict, note: str) -> None:
    made = _read(ctx, lambda views: decide(views.store, tuning, candidate, verdict, "cli", note))
    print(f"tuning {tuning}: candidate {made.candidate[:12]} {made.verdict}")


def approve(ctx: typer.Context, tuning: TuningArg, candidate: CandidateArg, note: NoteOption = "") -> None:
    """Publish a candidate that waits for a person (`gate.approval: manual`); its case goes on."""
    _decide(ctx, tuning, candidate, "approved", note)


def reject(ctx: typer.Context, tuning: TuningArg, candidate: CandidateArg, note: NoteOption = "") -> None:
    """Reject a candidate that waits for a person; it is kept as a rejected candidate, its case goes on."""
    _decide(ctx, tuning, candidate, "rejected", note)


def register(app: typer.Typer) -> None:
    """`tunefleet versions`, `diff`, `why`, `approve` and `reject`."""
    app.command("versions")(versions)
    app.command("diff")(diff)
    app.command("why")(why)
    app.command("approve")(approve)
    app.command("reject")(reject)
