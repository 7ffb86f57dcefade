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
from service.kinds.evals.compare import chance_line, compare
from service.kinds.evals.gate.report import GateTally, gate_lines, gate_tally
from service.kinds.evals.history.changes import ReportChanges, changes_lines, report_changes
from service.kinds.evals.models import Comparison, EvalResults, EvalSpec, Purpose
from service.kinds.evals.names import final_eval_id, initial_eval_id
from service.kinds.evals.results import read_results
from service.kinds.evals.split import read_split
from service.kinds.evals.stats import Rate
from service.kinds.evals.store import EvalsStore
from service.kinds.evals.versions import current_main

REPORT_FILE = "REPORT.md"


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
        default=None, description="The acceptance gate's verdicts (service.kinds.evals.gate)."
    )
    changes: ReportChanges | None = Field(
        default=None, description="What changed, version by version (service.kinds.evals.history.changes)."
    )
    main: str | None = Field(
        default=None, description="The tuning's current version (`main`) when the report was built."
    )

    @property
    def stale(self) -> bool:
        """Whether `main` moved on from the final version measured (cases submitted since were tuned on)."""
        return self.after is not None and self.main is not None and self.main != self.after.version


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
    train = train_outcomes(tuning)
    before = _results(evals, tuning.name, "holdout-initial")
    after = _results(evals, tuning.name, "holdout-final")
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
        split=read_split(tuning),
        train=train,
        before=before,
        after=after,
        comparison=compare(before, after) if before is not None and after is not None else None,
        evaluation_usage=spent,
        gates=gate_tally(tuning),
        changes=report_changes(tuning),
        main=current_main(tuning),
    )


def _results(evals: EvalsStore, tuning: str, purpose: Purpose) -> EvalResults | None:
    """The daemon's held-out evaluation of the tuning for this purpose; None when there is none, or
    when what its id holds is not the daemon's (service.kinds.evals.names)."""
    eval_id = initial_eval_id(tuning) if purpose == "holdout-initial" else final_eval_id(tuning)
    found = evals.eval(eval_id)
    if not found.exists() or not ours(found.spec(), tuning, purpose):
        return None
    return read_results(found)


def ours(spec: EvalSpec, tuning: str, purpose: Purpose) -> bool:
    """Whether an evaluation is the daemon's held-out run of this tuning for this purpose."""
    return spec.tuning == tuning and spec.purpose == purpose


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
    if report.stale:
        lines += [stale_note(report), ""]
    if not report.complete:
        lines += ["*In progress: not every train case or held-out evaluation has ended yet.*", ""]
    if report.comparison is not None:  # the answer first: is the final version better beyond chance?
        said = chance_line(report.comparison, "the imported version", "the final version")
        lines += [f"**Held-out cases: {said[0].lower()}{said[1:]}**", ""]
    lines += _split_lines(report)
    lines += ["## Train outcomes", "", "| outcome | cases |", "|---|---:|"]
    lines += [f"| {outcome} | {n} |" for outcome, n in report.train.by_outcome.items()]
    if report.train.unfinished:
        lines.append(f"| unfinished | {report.train.unfinished} |")
    lines += [f"| **all** | {report.train.cases} |", ""]
    lines += _held_out_lines(report)
    lines += gate_lines(report.gates)
    lines += changes_lines(report.changes)
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
    lines += _home_lines(report)
    return "\n".join(lines)


def stale_note(report: TuningReport) -> str:
    """What a report whose `main` moved on from its final version says, and how to measure `main`."""
    assert report.after is not None and report.main is not None
    return (
        f"*Stale: the final version measured below is `{report.after.version[:12]}`, and `main` has moved "
        f"since, to `{report.main[:12]}` (cases submitted after the tuning ended were tuned on). To measure "
        f"it: `tunefleet eval run {report.tuning} --split holdout` (it prints the new evaluation's id), then "
        f"`tunefleet eval compare {initial_eval_id(report.tuning)} <that id>`.*"
    )


def _home_lines(report: TuningReport) -> list[str]:
    """How to take the tuned instructions home (service.client.export)."""
    lines = [
        "## Taking the instructions home",
        "",
        f"`tunefleet export {report.tuning} DIR` writes the current version (`main`) into the folder DIR, "
        "as plain files.",
    ]
    if report.stale:
        assert report.after is not None
        lines[-1] += (
            f" The version measured above as final, which `main` has moved on from: `tunefleet export "
            f"{report.tuning} DIR --version {report.after.version[:12]}`."
        )
    elif report.after is not None:
        lines[-1] += f" It is the version measured above as final (`{report.after.version[:12]}`)."
    return [*lines, ""]


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
