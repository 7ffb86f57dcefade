"""The report's account of what the tuning changed (REPORT.md, "What changed"): the diff from the imported
version to the final one, told version by version, each part tied to the case and try that asked for it
and to its gate's verdict, then the candidates that were rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.core.errors import TunefleetError
from service.core.store import TuningStore
from service.kinds.evals.history.models import VersionRow
from service.kinds.evals.history.read import HistoryReader

PATCH_MAX_LINES = 120
"""The most lines of one version's patch the report shows (`tunefleet diff` shows it whole)."""


class Change(BaseModel):
    """A published version and its patch from the version before it."""

    model_config = ConfigDict(extra="forbid")

    version: VersionRow
    patch: str
    truncated: bool = Field(default=False, description="The patch was cut at PATCH_MAX_LINES lines.")


class ReportChanges(BaseModel):
    """What changed from the imported version to the final one."""

    model_config = ConfigDict(extra="forbid")

    initial: str
    final: str
    added: int
    removed: int
    tokens_before: int
    tokens_after: int
    published: list[Change]
    rejected: list[VersionRow]


def report_changes(tuning: TuningStore) -> ReportChanges | None:
    """The changes, None when the tuning's repository cannot be read (not imported yet)."""
    try:
        reader = HistoryReader(tuning, None)
        found = reader.versions()
    except TunefleetError:
        return None
    rows = found.versions
    initial = next(row for row in rows if row.status == "initial")
    final = next(row for row in rows if row.id == found.current)
    added, removed = reader.history.lines(initial.id, final.id)
    published = []
    for row in rows:
        if row.status != "published":
            continue
        lines = (reader.history.diff(row.parent, row.id).patch or "").splitlines()
        patch = "\n".join(lines[:PATCH_MAX_LINES])
        published.append(Change(version=row, patch=patch, truncated=len(lines) > PATCH_MAX_LINES))
    return ReportChanges(
        initial=initial.id,
        final=final.id,
        added=added,
        removed=removed,
        tokens_before=initial.tokens,
        tokens_after=final.tokens,
        published=published,
        rejected=[row for row in rows if row.status == "rejected"],
    )


def _origin(row: VersionRow) -> str:
    o = row.origin
    return "-" if o is None else f"{o.case} r{o.rev} {o.phase}/{o.attempt}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def changes_lines(changes: ReportChanges | None) -> list[str]:
    """REPORT.md's section on what changed."""
    if changes is None:
        return []
    lines = [
        "## What changed",
        "",
        f"From the imported version `{changes.initial[:12]}` to the final `{changes.final[:12]}`: "
        f"+{changes.added} -{changes.removed} lines, {changes.tokens_before:,} -> {changes.tokens_after:,} "
        f"tokens (cl100k_base; `tunefleet diff TUNING initial main`). Version by version:",
        "",
    ]
    if not changes.published:
        lines += ["No edit was published: the final version is the imported one.", ""]
    for change in changes.published:
        row = change.version
        gate = (
            "published without a gate"
            if row.gate is None
            else f"{row.gate.by} {row.gate.verdict}: {row.gate.why}"
        )
        lines += [
            f"### `{row.id[:12]}` from {_origin(row)}",
            "",
            f"- applier's summary: {_cell(row.summary) or '-'}",
            f"- {_cell(gate)}",
            "",
            "```diff",
            *change.patch.splitlines(),
            *(["... (cut; `tunefleet diff` shows it whole)"] if change.truncated else []),
            "```",
            "",
        ]
    if changes.rejected:
        lines += ["### Rejected candidates", "", "| candidate | from | by | why |", "|---|---|---|---|"]
        for row in changes.rejected:
            by, why = (row.gate.by, row.gate.why) if row.gate is not None else ("-", "-")
            lines.append(f"| `{row.id[:12]}` | {_origin(row)} | {by} | {_cell(why)} |")
        lines.append("")
    return lines
