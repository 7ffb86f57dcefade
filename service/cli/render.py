"""Renderings shared by the CLI commands: status, results, one case; as rich tables or as TSV.

In a terminal, tables fit its width (`results` fits 120 columns: the reason wraps, nothing else is
cut). Anywhere else (a pipe, a file) `out_console` is wide enough that every value is printed whole.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from pydantic import BaseModel
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from service.cli.support import Format
from service.client.gc import GcReport
from service.core.models.records import Usage
from service.core.models.status import (
    WAIT_WORDS,
    CaseDetail,
    FleetStatus,
    Hold,
    LlmLimit,
    ResultRow,
    TuningStatus,
)

STATE_STYLE = {"completed": "green", "difficult": "yellow", "failed": "red", "cancelled": "magenta"}
"""The states a case ends in, in the order `status` and `watch` show their counts, and their styles."""

PIPE_WIDTH = 10_000
"""The width of output that goes to no terminal: tables are as wide as their values, never cut."""


def out_console() -> Console:
    """Where a command prints: a terminal at its width; anything else so wide that no value is cut."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


def print_as(
    fmt: Format,
    as_json: Callable[[], str],
    as_tsv: Callable[[], str],
    as_table: Callable[[], RenderableType],
) -> None:
    """Print what a command shows in the format asked (`--format`): JSON, tab-separated lines (as they
    are: they end with their line break), or the view for people (`out_console`). Only the one asked for
    is made."""
    if fmt is Format.json:
        print(as_json())
    elif fmt is Format.tsv:
        sys.stdout.write(as_tsv())
    else:
        out_console().print(as_table())


def print_json_or(as_json: bool, model: BaseModel, view: Callable[[], RenderableType]) -> None:
    """Print a command's model as JSON (`--json`), or its view for people (`out_console`)."""
    if as_json:
        print(model.model_dump_json(indent=2))
    else:
        out_console().print(view())


def tsv(header: list[str], rows: Iterable[Sequence[object]]) -> str:
    """Tab-separated lines: the header, then one line per row (tabs and line breaks in values escaped)."""

    def cell(value: object) -> str:
        text = "" if value is None else str(value)
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")

    return "".join("\t".join(cell(v) for v in row) + "\n" for row in [header, *rows])


def status_tsv(status: FleetStatus) -> str:
    """`tunefleet status --format tsv`: one line per tuning."""
    header = ["tuning", "submitted", "waiting", "running", "running_by_step", *STATE_STYLE]
    header += ["tokens", "unmeasured_tokens", "cost_usd", "held", "estimated_tokens"]
    rows = [
        [
            t.name,
            t.submitted,
            t.waiting,
            t.running,
            ", ".join(f"{k} {v}" for k, v in sorted(t.running_by_step.items())),
            *outcome_counts(t).values(),
            t.tokens,
            t.unmeasured_tokens,
            f"{t.cost_usd:.6f}",
            t.held.reason if t.held is not None else "",
            t.estimated_tokens,
        ]
        for t in status.tunings
    ]
    return tsv(header, rows)


def results_tsv(rows: list[ResultRow]) -> str:
    """`tunefleet results --format tsv`: one line per case, every value whole."""
    header = ["case", "rev", "state", "reason", "tokens", "cost_usd", "held"]
    header += ["estimated_tokens", "unmeasured_tokens", "flaky"]
    cells = [
        [
            r.case,
            r.rev,
            r.state,
            r.reason or "",
            r.tokens,
            f"{r.cost_usd:.6f}",
            r.held or "",
            r.estimated_tokens,
            r.unmeasured_tokens,
            "yes" if r.flaky else "",
        ]
        for r in rows
    ]
    return tsv(header, cells)


def outcome_counts(tuning: TuningStatus) -> dict[str, int]:
    """How many of a tuning's cases ended in each state, keyed (and ordered) as STATE_STYLE."""
    counts = {
        "completed": tuning.completed,
        "difficult": tuning.difficult,
        "failed": tuning.failed,
        "cancelled": tuning.cancelled,
    }
    return {state: counts[state] for state in STATE_STYLE}


def status_table(status: FleetStatus) -> Group:
    breaker = status.breaker.get("state", "closed")
    head = Text.assemble(
        ("queue ", "bold"),
        str(status.queue_depth),
        "  ",
        ("running ", "bold"),
        str(status.in_progress) + (f" ({words})" if (words := status.running_words()) else ""),
        "  ",
        ("workers ", "bold"),
        str(len(status.workers)),
        "  ",
        ("breaker ", "bold"),
        (breaker, "red" if breaker == "open" else "green"),
        ("  PAUSED" if status.paused else "", "bold red"),
        (f"  STORE FULL ({status.store_full}): no job is claimed" if status.store_full else "", "bold red"),
        (f"  REDIS FULL ({status.redis_full})" if status.redis_full else "", "bold red"),
    )
    table = Table(
        "tuning",
        "submitted",
        "waiting",
        "running",
        *STATE_STYLE,
        "tokens",
        "cost $",
        title=None,
    )
    for t in status.tunings:
        steps = ", ".join(f"{k} {v}" for k, v in sorted(t.running_by_step.items()))
        table.add_row(
            Text.assemble(t.name, (" HELD", "bold red") if t.held is not None else ""),
            str(t.submitted),
            str(t.waiting),
            ", ".join(filter(None, [f"{t.running} {steps}".strip(), *waits_words(t)])),
            *(str(n) for n in outcome_counts(t).values()),
            f"{t.tokens:,}",
            f"{t.cost_usd:.4f}",
        )
    mirrors = [mirror_line(t) for t in status.tunings if t.mirror is not None]
    unmeasured = [unmeasured_line(t) for t in status.tunings if t.unmeasured_tokens or t.estimated_tokens]
    holds = [hold_line(t.name, t.held) for t in status.tunings if t.held is not None]
    locks = [lock_line(t) for t in status.tunings if t.lock.held]
    gates = [gates_line(t) for t in status.tunings if t.gates is not None]
    throttled = [llm_limit_line(limit) for limit in status.llm_limits]
    return Group(head, table, *holds, *locks, *gates, *mirrors, *unmeasured, *throttled)


def gates_line(tuning: TuningStatus) -> Text:
    """A tuning's acceptance gates: candidates under gate, verdicts, re-bases and what the gates cost."""
    assert tuning.gates is not None
    return Text.assemble((f"gate {tuning.name}: ", "bold"), tuning.gates.line())


def llm_limit_line(limit: LlmLimit) -> Text:
    """An LLM provider that answered 429: the calls at once the fleet allows it now, of its configured."""
    return Text.assemble(
        (f"llm {limit.name or limit.provider}: ", "bold"),
        (
            f"{limit.limit} of {limit.max} calls at once after {limit.cuts} cut(s) on 429; "
            "one more every 10 s without a 429",
            "yellow",
        ),
    )


def waits_words(tuning: TuningStatus) -> list[str]:
    """`2 waiting for resume`, …: the cases workers hold that wait to start their next step."""
    return [f"{n} {WAIT_WORDS[c]}" for c, n in sorted(tuning.waiting_by_cause.items()) if c in WAIT_WORDS]


def lock_line(tuning: TuningStatus) -> Text:
    """Who holds a tuning's improvements lock: its case and worker (or that it is changing hands: granted
    to an apply whose note has not reached the running hash yet)."""
    lock, holder = tuning.lock, tuning.lock.holder
    who = "an apply just granted"
    if holder is not None:
        who = f"case {holder.case} r{holder.rev} on worker {holder.worker or '?'}"
    return Text.assemble((f"lock {tuning.name}: ", "bold"), f"held by {who}, {lock.pending} pending")


def hold_line(tuning: str, hold: Hold) -> Text:
    """Why a held tuning starts no run, and how to release it."""
    return Text.assemble(
        (f"HELD {tuning} ({hold.kind}) since {hold.at:%Y-%m-%d %H:%M:%S} UTC: ", "bold red"),
        (hold.reason, "red"),
        f"; its cases wait: raise the budget or `tunefleet resume {tuning}`"
        if hold.kind == "budget"
        else f"; its cases wait: `tunefleet resume {tuning}`",
    )


def unmeasured_line(tuning: TuningStatus) -> Text:
    """How a tuning's tokens were counted, when not all were measured: those the fleet estimated
    (usage source `estimated`) and those nobody measured, the agents' own word (source `agent`)."""
    total = tuning.tokens or 1
    measured = max(0, tuning.tokens - tuning.estimated_tokens - tuning.unmeasured_tokens)
    parts = [f"{measured:,} measured"]
    if tuning.estimated_tokens:
        parts.append(f"{tuning.estimated_tokens:,} estimated ({tuning.estimated_tokens / total:.0%})")
    if tuning.unmeasured_tokens:
        share = tuning.unmeasured_tokens / total
        parts.append(f"{tuning.unmeasured_tokens:,} ({share:.0%}) counted by no one but the agents")
    return Text.assemble(
        (f"tokens {tuning.name}: ", "bold"),
        (f"of {tuning.tokens:,}: " + ", ".join(parts), "yellow"),
    )


def mirror_line(tuning: TuningStatus) -> Text:
    """Where the daemon's pushes of a tuning's versions to its remote stand."""
    m = tuning.mirror
    assert m is not None
    where = f"mirror {tuning.name} → {m.remote} {m.branch}: "
    if m.error is not None:
        since = m.failing_since or m.at
        tries = f"{m.attempts} attempt{'s' if m.attempts != 1 else ''}"
        return Text.assemble(
            (where, "bold"), (f"failing since {since:%Y-%m-%d %H:%M:%S} UTC ({tries}): {m.error}", "red")
        )
    pushed = f"pushed {(m.version or '')[:10]} at {m.pushed_at or m.at:%Y-%m-%d %H:%M:%S} UTC"
    if tuning.version is not None and m.version != tuning.version:
        return Text.assemble((where, "bold"), (f"{pushed}; {tuning.version[:10]} not yet pushed", "yellow"))
    return Text.assemble((where, "bold"), (pushed, "green"))


class Declared(NamedTuple):
    """The outcome a demo case declares (`tunefleet demo`), and whether its result met it (None: no
    result yet)."""

    words: str
    met: bool | None


def row_tokens(row: ResultRow) -> str:
    """A case's tokens, with those the fleet estimated and those only the agents counted, if any."""
    apart = [f"~{row.estimated_tokens:,} estimated"] if row.estimated_tokens else []
    apart += [f"{row.unmeasured_tokens:,} agent's word"] if row.unmeasured_tokens else []
    return f"{row.tokens:,}" + (f" ({', '.join(apart)})" if apart else "")


def results_table(rows: list[ResultRow], declared: Mapping[str, Declared] | None = None) -> Table:
    """One row per case. Every column but the reason is as wide as its widest value (so never cut); the
    reason takes what width is left and wraps. With `declared` (by case id), the demo's two columns too."""

    def widest(header: str, values: Iterable[str]) -> int:
        return max([len(header), *(len(v) for v in values)])

    table = Table()
    table.add_column("case", no_wrap=True, min_width=widest("case", (r.case for r in rows)))
    table.add_column(
        "rev", justify="right", no_wrap=True, min_width=widest("rev", (str(r.rev) for r in rows))
    )
    states = (r.state + (", flaky" if r.flaky else "") + (", held" if r.held else "") for r in rows)
    table.add_column("state", no_wrap=True, min_width=widest("state", states))
    table.add_column("reason", overflow="fold", ratio=1)
    table.add_column(
        "tokens", justify="right", no_wrap=True, min_width=widest("tokens", (row_tokens(r) for r in rows))
    )
    table.add_column(
        "cost $",
        justify="right",
        no_wrap=True,
        min_width=widest("cost $", (f"{r.cost_usd:.4f}" for r in rows)),
    )
    if declared:
        table.add_column("declared", overflow="fold", ratio=1)
        table.add_column("met", no_wrap=True, min_width=3)
    for r in rows:
        cells: list[str | Text] = [
            r.case,
            str(r.rev),
            Text(r.state, STATE_STYLE.get(r.state, ""))
            + (Text(", flaky", "yellow") if r.flaky else "")
            + (Text(", held", "bold red") if r.held else ""),
            r.reason or (f"waits: {r.held}" if r.held else ""),
            row_tokens(r),
            f"{r.cost_usd:.4f}",
        ]
        if declared:
            words, met = declared.get(r.case, Declared("", None))
            cells += [
                words,
                Text("" if met is None else ("yes" if met else "NO"), "green" if met else "bold red"),
            ]
        table.add_row(*cells)
    return table


def case_view(detail: CaseDetail) -> Group:
    parts: list[Table | Text] = [Text(f"{detail.tuning} / {detail.case} r{detail.rev}", style="bold")]
    if detail.result:
        parts.append(Text(f"result: {detail.result['state']} {detail.result.get('reason') or ''}"))
    if detail.handbacks:
        spent = sum((h.usage for h in detail.handbacks), Usage())
        parts.append(
            Text(
                f"provider hand-backs: {len(detail.handbacks)}, cutting short steps that spent "
                f"{spent.tokens:,} tokens, ${spent.cost_usd:.4f}; the last: {detail.handbacks[-1].error}"
            )
        )
    table = Table("try", "version", "verdict", "rubric", "summary", "improvements", "apply")
    for a in detail.attempts:
        fb = a.feedback
        rubric = " ".join(f"{k}={v:g}" for k, v in fb.rubric.items()) if fb else ""
        improvements = "\n".join(f"[{i.target}] {i.lead}" for i in fb.improvements) if fb else ""
        applied = ""
        if a.apply:
            applied = (
                f"structural: {a.apply.output.structural}"
                if a.apply.output.structural
                else ((a.apply.version or "no change")[:10])
            )
        table.add_row(
            f"{a.phase}/{a.folder}",
            a.run.version[:10] if a.run else "",
            fb.verdict if fb else "",
            rubric,
            fb.summary if fb else "",
            improvements,
            applied,
        )
    parts.append(table)
    return Group(*parts)


def gc_text(report: GcReport) -> Text:
    """`tunefleet gc`'s answer: each removal, then what it frees in all, and what was kept and why."""
    verb = "removed" if report.applied else "would remove"
    text = Text()
    for removal in report.removals:
        where = f"{removal.kind} {removal.name} of {removal.tuning}"
        size = f" ({removal.bytes:,} bytes, {removal.inodes:,} inodes)" if removal.inodes else ""
        if removal.redis_fields:
            size = f" (from Redis: {removal.redis_fields} fields, {removal.redis_bytes:,} bytes)"
        text.append(f"{verb} {where}{size}\n")
    text.append(
        f"{verb} {len(report.removals)}: {report.bytes:,} bytes, {report.inodes:,} inodes on disk; "
        f"{report.redis_bytes:,} bytes of Redis fields\n",
        style="bold",
    )
    for kept in report.kept:
        text.append(f"kept {kept}\n", style="dim")
    if not report.applied and report.removals:
        text.append("(a dry run: `tunefleet gc --apply` removes them)\n", style="dim")
    return text
