"""How `tunefleet eval` prints evaluations: rich tables, tab-separated lines, or JSON."""

from __future__ import annotations

import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from service.cli.render import tsv
from service.kinds.evals.compare import chance_line
from service.kinds.evals.models import Comparison, EvalProgress, EvalResults
from service.kinds.evals.plan import Plan
from service.kinds.evals.report import TuningReport, percent, unchanged_note
from service.kinds.evals.stats import Rate
from service.kinds.evals.versions import asked_label

COUNT_COLUMNS = ["passed", "graded", "rate", "low", "high", "failed", "cancelled", "voids"]
"""The counts that a progress line and a summary line both carry, in this order (count_cells)."""


def count_cells(rate: Rate, failed: int, cancelled: int, voids: int) -> list[object]:
    """The COUNT_COLUMNS of one evaluation: its pass rate with its interval, then the items it did not
    grade and its void runs."""
    return [
        rate.passed,
        rate.graded,
        f"{rate.rate:.4f}",
        f"{rate.low:.4f}",
        f"{rate.high:.4f}",
        failed,
        cancelled,
        voids,
    ]


def progress_rows(found: list[EvalProgress]) -> list[list[object]]:
    return [
        [
            p.head.id,
            p.head.tuning,
            p.head.version[:12],
            p.head.version_asked,
            p.status,
            f"{p.done}/{p.head.items}",
            *count_cells(p.rate, p.failed, p.cancelled, p.voids),
        ]
        for p in found
    ]


PROGRESS_HEADER = ["eval", "tuning", "version", "asked", "status", "done", *COUNT_COLUMNS]


def progress_tsv(found: list[EvalProgress]) -> str:
    return tsv(PROGRESS_HEADER, progress_rows(found))


def progress_table(found: list[EvalProgress], mains: dict[str, str | None] | None = None) -> Table:
    """`tunefleet eval status`: every evaluation with its live counters (`mains`: each tuning's current
    version, so that an evaluation of `main` says `was main` once main moved on)."""
    table = Table("eval", "tuning", "version", "status", "done", "pass rate (95 % CI)", "failed", box=None)
    for p in found:
        asked = asked_label(p.head.version_asked, p.head.version, (mains or {}).get(p.head.tuning))
        table.add_row(
            p.head.id,
            p.head.tuning,
            f"{p.head.version[:12]} ({asked})",
            p.status,
            f"{p.done}/{p.head.items}",
            percent(p.rate),
            str(p.failed),
        )
    return table


def summary_row(r: EvalResults) -> list[object]:
    return [
        r.id,
        r.tuning,
        r.version,
        r.version_asked,
        r.source,
        r.repeats,
        r.status,
        r.done,
        r.items,
        *count_cells(r.rate, r.failed, r.cancelled, r.voids),
        ",".join(r.flaky),
        r.usage.tokens,
        f"{r.usage.cost_usd:.6f}",
    ]


SUMMARY_HEADER = [
    "eval",
    "tuning",
    "version",
    "asked",
    "source",
    "repeats",
    "status",
    "done",
    "items",
    *COUNT_COLUMNS,
    "flaky",
    "tokens",
    "cost_usd",
]


def summary_tsv(r: EvalResults) -> str:
    """`tunefleet eval status ID --format tsv`: one line."""
    return tsv(SUMMARY_HEADER, [summary_row(r)])


def summary_lines(r: EvalResults, main: str | None = None) -> Text:
    """`tunefleet eval status ID`: what it runs and how far it is (`main`: the tuning's current version)."""
    name = f" ({r.name})" if r.name and r.name != r.id else ""
    lines = [
        f"eval {r.id}{name}: tuning {r.tuning}, version {r.version[:12]} "
        f"({asked_label(r.version_asked, r.version, main)}), "
        f"cases: {r.source}, {r.repeats} repeat(s)",
        f"{r.status}: {r.done}/{r.items} items ended; pass rate {percent(r.rate)}",
        f"failed for infrastructure: {r.failed}; cancelled: {r.cancelled}; void runs set aside: {r.voids}",
        f"spent: {r.usage.tokens:,} tokens, ${r.usage.cost_usd:.4f}",
    ]
    return Text("\n".join(lines))


CASES_HEADER = ["case", "rev", "repeats", "graded", "passed", "pass_fraction", "outcome", "failed", "pending"]


def cases_rows(r: EvalResults) -> list[list[object]]:
    return [
        [
            row.case,
            row.rev,
            row.repeats,
            row.graded,
            row.passed,
            "" if row.pass_fraction is None else f"{row.pass_fraction:.4f}",
            row.outcome,
            row.failed,
            row.pending,
        ]
        for row in r.cases
    ]


def cases_tsv(r: EvalResults) -> str:
    """`tunefleet eval results ID --format tsv`: one line per case."""
    return tsv(CASES_HEADER, cases_rows(r))


def cases_table(r: EvalResults) -> Table:
    """`tunefleet eval results ID`: one row per case; with repeats its pass fraction, and flaky marked."""
    table = Table("case", "rev", "passed", "outcome", "failed (infra)", box=None)
    for row in r.cases:
        fraction = f"{row.passed}/{row.graded}" if row.graded else "-"
        table.add_row(row.case, str(row.rev), fraction, row.outcome, str(row.failed) if row.failed else "")
    return table


def detail_view(r: EvalResults) -> Group:
    """`tunefleet eval show ID`: the summary, the mean score of each rubric item, flaky cases, the items
    that failed for infrastructure, then the cases."""
    rubric = Table("rubric item", "mean score", box=None)
    for rubric_id, score in r.rubric.items():
        rubric.add_row(rubric_id, f"{score:.3f}")
    parts: list[Text | Table] = [summary_lines(r), Text(""), rubric]
    if r.flaky:
        parts += [Text(f"\nflaky (passed some repeats, not all): {', '.join(r.flaky)}")]
    if r.infra:
        parts += [Text("\nfailed for infrastructure (not in the pass rate):")]
        parts += [Text(f"  {f.case} #{f.repeat}: {f.reason or '?'}") for f in r.infra]
    parts += [Text(""), cases_table(r)]
    return Group(*parts)


def detail_json(r: EvalResults) -> str:
    return r.model_dump_json(indent=2)


COMPARE_HEADER = ["case", "direction", "before", "after"]


def compare_tsv(c: Comparison) -> str:
    """`tunefleet eval compare A B --format tsv`: one line per flip, after a comment-free header."""
    return tsv(COMPARE_HEADER, [[f.case, f.direction, f"{f.before:.4f}", f"{f.after:.4f}"] for f in c.flips])


def compare_view(c: Comparison) -> Group:
    """`tunefleet eval compare A B`: both sides, the paired test, the difference and the flips."""
    sides = Table("", "eval", "version", "pass rate", "tokens", "cost (USD)", box=None)
    for label, side in (("A (before)", c.before), ("B (after)", c.after)):
        sides.add_row(
            label, side.id, side.version[:12], percent(side.rate), f"{side.tokens:,}", f"{side.cost_usd:.4f}"
        )
    diff = c.difference
    lines = [
        chance_line(c),
        f"pairs: {c.pairs} cases graded on both sides ({c.both} pass on both, {c.neither} on neither)",
        f"gained (fail -> pass): {c.gained}; lost (pass -> fail): {c.lost}; "
        f"exact McNemar p = {c.mcnemar_p:.4g}",
        f"difference B - A: {100 * diff.difference:+.1f} points, 95 % CI {100 * diff.low:+.1f} to "
        f"{100 * diff.high:+.1f} ({diff.method})",
    ]
    if c.unpaired:
        lines.append(f"graded on one side only (left out): {', '.join(c.unpaired)}")
    flips = Table("case", "flip", "A", "B", box=None)
    for flip in c.flips:
        arrow = "fail -> pass" if flip.direction == "gained" else "pass -> fail"
        flips.add_row(flip.case, arrow, f"{flip.before:.2f}", f"{flip.after:.2f}")
    return Group(sides, Text(""), Text("\n".join(lines)), Text(""), flips)


def as_json(value: object) -> str:
    return json.dumps(value, indent=2)


def before_after(report: TuningReport) -> Group:
    """The held-out pass rate before and after tuning, the paired test and the flips (`make demo`)."""
    table = Table(
        "held-out",
        "version",
        "pass rate (95 % CI)",
        "failed (infra)",
        title=f"tuning {report.tuning}: held-out cases, before and after",
        title_justify="left",
        box=None,
    )
    for label, which, results in (("before", "imported", report.before), ("after", "final", report.after)):
        if results is None:
            table.add_row(label, which, "not evaluated", "")
            continue
        table.add_row(label, f"{which} {results.version[:12]}", percent(results.rate), str(results.failed))
    parts: list[Table | Text] = [table]
    unchanged = unchanged_note(report)
    if unchanged is not None:
        parts.append(Text(unchanged))
    c = report.comparison
    if c is not None:
        diff = c.difference
        gained = ", ".join(f.case for f in c.flips if f.direction == "gained") or "none"
        lost = ", ".join(f.case for f in c.flips if f.direction == "lost") or "none"
        parts.append(
            Text(
                f"{chance_line(c, 'the imported version', 'the final version')}\n"
                f"difference {100 * diff.difference:+.1f} points (95 % CI {100 * diff.low:+.1f} to "
                f"{100 * diff.high:+.1f}); exact McNemar p = {c.mcnemar_p:.4g}\n"
                f"gained: {gained}\nlost: {lost}\n"
                f"cost: tuning ${report.train.usage.cost_usd:.4f}, "
                f"evaluation ${report.evaluation_usage.cost_usd:.4f}"
            )
        )
    return Group(*parts)


PLAN_HEADER = ["repeats", "cases", "runs"]


def plan_tsv(p: Plan) -> str:
    """`tunefleet eval plan --format tsv`: one line per number of repeats."""
    return tsv(PLAN_HEADER, [[row.repeats, row.cases, row.runs] for row in p.rows])


def plan_view(p: Plan) -> Group:
    """`tunefleet eval plan`: what is planned for, then the cases needed at each number of repeats."""
    head = (
        f"to detect a change of {100 * p.difference:+.1f} points with {100 * p.power:.0f} % power at a "
        f"two-sided level of {p.alpha:g}, from {p.observed_cases} cases' pass rates "
        f"(mean run variance {p.run_variance:.3f} a side):"
    )
    table = Table("repeats", "cases", "graded runs (both versions)", box=None)
    for row in p.rows:
        table.add_row(str(row.repeats), f"{row.cases:,}", f"{row.runs:,}")
    return Group(Text(head), table)
