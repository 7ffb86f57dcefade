"""A tuning's report, `REPORT.md` in its folder: what tuning did to the agent on cases it never saw.

It holds the train outcomes; the held-out pass rate before (the imported version) and after (the
final version) with their intervals, the paired test and the flips; and the cost of tuning and the
cost of evaluation, apart. The daemon writes it once the final evaluation has ended; until then
`tunefleet report` renders what there is.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.holdout import HeldOut
from service.core.models.records import Usage
from service.core.store import TuningStore
from service.evals.compare import compare
from service.evals.models import Comparison, EvalResults
from service.evals.results import read_results
from service.evals.split import read_split
from service.evals.stats import Rate
from service.evals.store import EvalsStore
from service.gate.report import GateTally, gate_lines, gate_tally

REPORT_FILE = "REPORT.md"


def initial_eval_id(tuning: str) -> str:
    """The id of the daemon's evaluation of a tuning's imported version on its held-out cases."""
    return f"{tuning[:100]}.holdout-initial"


def final_eval_id(tuning: str) -> str:
    """The id of the daemon's evaluation of a tuning's final version on its held-out cases."""
    return f"{tuning[:100]}.holdout-final"


class TrainOutcomes(BaseModel):
    """How the tuning's train cases ended."""

    model_config = ConfigDict(extra="forbid")

    cases: int
    by_outcome: dict[str, int] = Field(description="`completed`, `difficult: <reason>`, ... -> cases.")
    unfinished: int
    usage: Usage = Field(description="What tuning the train cases spent.")


class TuningReport(BaseModel):
    """`REPORT.md` as data (`GET /api/tunings/{tuning}/report?format=json`)."""

    model_config = ConfigDict(extra="forbid")

    tuning: str
    complete: bool = Field(description="Every train case ended and both held-out evaluations did.")
    split: HeldOut | None
    train: TrainOutcomes
    before: EvalResults | None = None
    after: EvalResults | None = None
    comparison: Comparison | None = None
    evaluation_usage: Usage = Field(default_factory=Usage, description="What the evaluations spent.")
    gates: GateTally | None = Field(
        default=None, description="The acceptance gate's verdicts (service.gate)."
    )


def train_outcomes(tuning: TuningStore) -> TrainOutcomes:
    counts: dict[str, int] = {}
    usage = Usage()
    cases = unfinished = 0
    for case in tuning.latest_revs():
        cases += 1
        result = case.result()
        if result is None:
            unfinished += 1
            continue
        key = result.state if result.state != "difficult" else f"difficult: {_reason_kind(result.reason)}"
        counts[key] = counts.get(key, 0) + 1
        usage += result.usage
    return TrainOutcomes(
        cases=cases, by_outcome=dict(sorted(counts.items())), unfinished=unfinished, usage=usage
    )


def _reason_kind(reason: str | None) -> str:
    """`specification: <leads>` -> `specification` (the leads differ case by case)."""
    return (reason or "?").split(":", 1)[0]


def build_report(tuning: TuningStore, evals: EvalsStore) -> TuningReport:
    """The tuning's report as its folders hold it now."""
    split = read_split(tuning)
    train = train_outcomes(tuning)
    before = _results(evals, initial_eval_id(tuning.name))
    after = _results(evals, final_eval_id(tuning.name))
    comparison = compare(before, after) if before is not None and after is not None else None
    spent = Usage()
    for results in (before, after):
        if results is not None:
            spent += results.usage
    ended = ("finished", "cancelled")
    complete = (
        train.unfinished == 0
        and before is not None
        and after is not None
        and before.status in ended
        and after.status in ended
    )
    return TuningReport(
        tuning=tuning.name,
        complete=complete,
        split=split,
        train=train,
        before=before,
        after=after,
        comparison=comparison,
        evaluation_usage=spent,
        gates=gate_tally(tuning),
    )


def _results(evals: EvalsStore, eval_id: str) -> EvalResults | None:
    found = evals.eval(eval_id)
    return read_results(found) if found.exists() else None


def percent(rate: Rate) -> str:
    """`66.7 % (4/6, 95 % CI 30.0-90.3 %)`."""
    if rate.graded == 0:
        return "- (nothing graded)"
    return (
        f"{100 * rate.rate:.1f} % ({rate.passed}/{rate.graded}, "
        f"95 % CI {100 * rate.low:.1f}-{100 * rate.high:.1f} %)"
    )


def render_report(report: TuningReport) -> str:
    """REPORT.md."""
    lines = [f"# Tuning {report.tuning}: report", ""]
    if not report.complete:
        lines += ["*In progress: not every train case or held-out evaluation has ended yet.*", ""]
    lines += _split_lines(report)
    lines += ["## Train outcomes", "", "| outcome | cases |", "|---|---:|"]
    lines += [f"| {outcome} | {n} |" for outcome, n in report.train.by_outcome.items()]
    if report.train.unfinished:
        lines.append(f"| unfinished | {report.train.unfinished} |")
    lines += [f"| **all** | {report.train.cases} |", ""]
    lines += _held_out_lines(report)
    lines += gate_lines(report.gates)
    tuning, evaluation = report.train.usage, report.evaluation_usage
    lines += [
        "## Cost",
        "",
        "| spent on | tokens | USD |",
        "|---|---:|---:|",
        f"| tuning (train cases) | {tuning.tokens:,} | {tuning.cost_usd:.4f} |",
        f"| evaluation (held-out, before and after) | {evaluation.tokens:,} | {evaluation.cost_usd:.4f} |",
        "",
    ]
    return "\n".join(lines)


def _split_lines(report: TuningReport) -> list[str]:
    split = report.split
    if split is None:
        return [
            "No held-out split: add `holdout:` to the tuning file to measure it on cases it never saw.",
            "",
        ]
    how = (
        f"the folder {split.config.cases}"
        if split.config.cases is not None
        else f"a fraction of {split.config.fraction:g} drawn with seed {split.config.seed}"
    )
    return [
        f"Held out: {len(split.ids)} cases ({how}), never tuned on; evaluated "
        f"{split.config.repeats} time(s) each before and after.",
        "",
    ]


def unchanged_note(report: TuningReport) -> str | None:
    """What to say when the final version is the imported one (no edit was published): the two held-out
    measures then differ by the agent's own variance alone, not by the tuning."""
    before, after = report.before, report.after
    if before is None or after is None or before.version != after.version:
        return None
    return (
        "No edit was published: the final version is the imported one, so the two measures differ by "
        "the agent's own variance alone."
    )


def _held_out_lines(report: TuningReport) -> list[str]:
    lines = ["## Held-out cases, before and after", ""]
    rows = [("before", "imported", report.before), ("after", "final", report.after)]
    if all(results is None for _, _, results in rows):
        return [*lines, "Not evaluated yet.", ""]
    lines += [
        "| | version | evaluation | pass rate | failed (infra) | status |",
        "|---|---|---|---|---:|---|",
    ]
    for side, which, results in rows:
        if results is None:
            lines.append(f"| {side} | {which} | - | not started | - | - |")
            continue
        lines.append(
            f"| {side} | {which} `{results.version[:12]}` | {results.id} | {percent(results.rate)} | "
            f"{results.failed} | {results.status} ({results.done}/{results.items}) |"
        )
    lines.append("")
    unchanged = unchanged_note(report)
    if unchanged is not None:
        lines += [unchanged, ""]
    comparison = report.comparison
    if comparison is not None:
        diff = comparison.difference
        lines += [
            f"- Difference after - before: {100 * diff.difference:+.1f} points "
            f"(95 % CI {100 * diff.low:+.1f} to {100 * diff.high:+.1f}; {diff.method}), over "
            f"{comparison.pairs} cases graded on both sides.",
            f"- Exact McNemar test: p = {comparison.mcnemar_p:.4g} ({comparison.gained} gained, "
            f"{comparison.lost} lost).",
            f"- Gained (fail -> pass): {_names(comparison, 'gained')}",
            f"- Lost (pass -> fail): {_names(comparison, 'lost')}",
        ]
    flaky = sorted({case for r in (report.before, report.after) if r is not None for case in r.flaky})
    if flaky:
        lines.append(f"- Flaky (passed some repeats, not all): {', '.join(flaky)}")
    return [*lines, ""]


def _names(comparison: Comparison, direction: str) -> str:
    names = [flip.case for flip in comparison.flips if flip.direction == direction]
    return ", ".join(names) if names else "none"
