"""How `tunefleet versions`, `diff` and `why` print: a rich table or view for people, tab-separated lines,
or JSON (service.cli.render.print_as chooses)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from service.cli.render import tsv
from service.kinds.evals.history.models import EvalRate, VersionDiff, VersionList, VersionRow, VersionWhy

HEADER = [
    "id",
    "status",
    "current",
    "at",
    "case",
    "try",
    "added",
    "removed",
    "tokens",
    "gate",
    "gate_by",
    "gate_figures",
    "evals",
    "summary",
]
STATUS_STYLE = {"initial": "cyan", "published": "green", "rejected": "red", "candidate": "yellow"}


def try_of(row: VersionRow) -> str:
    origin = row.origin
    return "" if origin is None else f"r{origin.rev}/{origin.phase}/{origin.attempt}"


def gate_figures(row: VersionRow) -> str:
    """The gate's figures in a few words: its pass rates before and after and its items."""
    gate = row.gate
    if gate is None or gate.by != "gate":
        return "" if gate is None else gate.why
    if gate.candidate_rate is None or gate.baseline_rate is None:
        return gate.why
    return f"{gate.baseline_rate:.2f} -> {gate.candidate_rate:.2f} over {gate.items} items"


def eval_text(found: EvalRate) -> str:
    r = found.rate
    return f"{found.eval} {r.passed}/{r.graded} = {r.rate:.2f} [{r.low:.2f}, {r.high:.2f}]"


def _cells(row: VersionRow) -> list[object]:
    return [
        row.id,
        row.status,
        "yes" if row.current else "",
        row.at.isoformat(timespec="seconds"),
        row.origin.case if row.origin is not None else "",
        try_of(row),
        row.added,
        row.removed,
        row.tokens,
        row.gate.verdict if row.gate is not None else "",
        row.gate.by if row.gate is not None else "",
        gate_figures(row),
        "; ".join(eval_text(e) for e in row.evals),
        row.summary,
    ]


def versions_tsv(found: VersionList) -> str:
    return tsv(HEADER, (_cells(row) for row in found.versions))


def versions_table(found: VersionList) -> Table:
    table = Table(title=f"tuning {found.tuning}: versions, oldest first", title_justify="left")
    for name in ("version", "status", "at", "case / try", "+/-", "tokens", "gate", "evaluations", "summary"):
        table.add_column(name, overflow="fold")
    for row in found.versions:
        style = STATUS_STYLE[row.status]
        case = f"{row.origin.case} {try_of(row)}" if row.origin is not None else ""
        gate = "" if row.gate is None else f"{row.gate.verdict} ({row.gate.by}): {gate_figures(row)}"
        table.add_row(
            row.id[:12] + (" *" if row.current else ""),
            Text(row.status, style=style),
            row.at.strftime("%Y-%m-%d %H:%M:%S"),
            case,
            f"+{row.added} -{row.removed}",
            str(row.tokens),
            gate,
            "\n".join(eval_text(e) for e in row.evals),
            row.summary,
        )
    table.caption = "* the current version; sizes are cl100k_base tokens (docs/versions.md)"
    return table


def diff_text(found: VersionDiff) -> Text:
    """The patch, each line coloured as git colours it (rich drops the colours when not on a terminal)."""
    text = Text()
    text.append(f"{found.a} ({found.a_id[:12]}) -> {found.b} ({found.b_id[:12]}): ", style="bold")
    text.append(f"+{found.added} -{found.removed}\n", style="bold")
    for line in found.patch.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        else:
            style = ""
        text.append(line + "\n", style=style)
    return text


def why_view(found: VersionWhy) -> RenderableType:
    row = found.version
    parts: list[RenderableType] = [
        Text(f"tuning {found.tuning}: version {row.id} ({row.status})", style="bold"),
        Text(f"from: {row.origin.case} {try_of(row)}" if row.origin is not None else "from: the import"),
        Text(f"applier's summary: {row.summary or '-'}"),
    ]
    if found.feedback is not None:
        feedback = found.feedback
        parts.append(Text(f"feedback: {feedback.verdict}; {feedback.summary}", style="bold"))
        parts += [Text(f"  - [{i.target}] {i.change}") for i in feedback.improvements]
    if found.analysis:
        parts += [Text("analysis:", style="bold"), Text(found.analysis.rstrip())]
    if row.gate is not None:
        parts.append(Text(f"{row.gate.by}: {row.gate.verdict}: {row.gate.why}", style="bold"))
    if found.gate is not None:
        parts += [
            Text(f"  {i.case} #{i.repeat}: {i.baseline or '?'} -> {i.verdict or 'ungraded'}")
            for i in found.gate.items
        ]
    return Group(*parts)


def why_tsv(found: VersionWhy) -> str:
    row = found.version
    feedback = found.feedback
    rows = [
        ["version", row.id],
        ["status", row.status],
        ["case", row.origin.case if row.origin is not None else ""],
        ["try", try_of(row)],
        ["summary", row.summary],
        ["feedback", "" if feedback is None else f"{feedback.verdict}: {feedback.summary}"],
        ["analysis", found.analysis or ""],
        ["gate", "" if row.gate is None else f"{row.gate.by} {row.gate.verdict}: {row.gate.why}"],
    ]
    return tsv(["field", "value"], rows)
