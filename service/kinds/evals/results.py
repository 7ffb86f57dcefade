"""An evaluation's results, read from its items' folders (the store is the source of truth).

The pass rate is passed / graded with its 95 % Wilson interval: items that failed for
infrastructure (three voids in a row, say) or were cancelled have no grade, so they are left out
of it and counted apart. With repeats, each case has its pass fraction; a case that passed some of
its graded repeats and failed others is *flaky*.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from service.core.errors import StoreError
from service.core.io.files import read_model, write_model
from service.core.models.records import Usage
from service.kinds.evals.models import (
    CaseOutcome,
    CaseRow,
    EvalResults,
    EvalSpec,
    EvalStatus,
    InfraFailure,
    ItemResult,
)
from service.kinds.evals.stats import wilson
from service.kinds.evals.store import EvalStore

TOTALS = ("graded", "passed", "failed", "cancelled")
"""The counts of a case's items that an evaluation's results sum over its cases."""


def read_results(store: EvalStore) -> EvalResults:
    """The results of the evaluation in `store`, as its folders hold them now. Once every item has its
    outcome nothing changes any more (an outcome is written once, under the item's lease), so the
    results of an evaluation that ended are kept in `RESULTS.json` and read from there (by whoever
    read them first: a reader that may not write the store only pays the walk again)."""
    try:
        kept = read_model(store.results_file, EvalResults)
    except StoreError:
        kept = None  # torn or from another version: walked again and written anew
    if kept is not None:
        return kept
    spec = store.spec()
    scan = store.scan()
    results = summarize(spec, scan.outcomes, scan.voids, started=scan.started)
    if results.status in ("finished", "cancelled"):
        with contextlib.suppress(OSError):
            write_model(store.results_file, results)
    return results


def summarize(
    spec: EvalSpec, outcomes: Mapping[tuple[str, int], ItemResult], voids: int = 0, started: bool = True
) -> EvalResults:
    """The results of `spec` given its items' outcomes by (case, repeat)."""
    rows: list[CaseRow] = []
    scores: dict[str, list[float]] = {}
    spent = _Spent()
    infra: list[InfraFailure] = []
    totals = dict.fromkeys(TOTALS, 0)
    for case in spec.cases:
        counts = {"graded": 0, "passed": 0, "failed": 0, "cancelled": 0, "pending": 0}
        for repeat in range(1, spec.repeats + 1):
            item = outcomes.get((case.id, repeat))
            if item is None:
                counts["pending"] += 1
                continue
            spent.add(item.usage)
            if item.state == "graded":
                counts["graded"] += 1
                counts["passed"] += item.verdict == "pass"
                for rubric_id, score in item.rubric.items():
                    scores.setdefault(rubric_id, []).append(score)
            elif item.state == "failed":
                counts["failed"] += 1
                infra.append(InfraFailure(case=case.id, repeat=repeat, reason=item.reason))
            else:
                counts["cancelled"] += 1
        row = CaseRow(
            case=case.id,
            rev=case.rev,
            repeats=spec.repeats,
            pass_fraction=counts["passed"] / counts["graded"] if counts["graded"] else None,
            outcome=_outcome(counts),
            **counts,
        )
        for key in TOTALS:
            totals[key] += counts[key]
        rows.append(row)
    done = totals["graded"] + totals["failed"] + totals["cancelled"]
    return EvalResults(
        **spec.head_fields(),
        source=spec.source,
        repeats=spec.repeats,
        status=_status(spec.total, done, totals["cancelled"], started),
        items=spec.total,
        done=done,
        **totals,
        voids=voids,
        rate=wilson(totals["passed"], totals["graded"]),
        rubric={rubric_id: sum(v) / len(v) for rubric_id, v in sorted(scores.items())},
        cases=rows,
        flaky=[row.case for row in rows if row.outcome == "flaky"],
        usage=spent.usage(),
        infra=infra,
    )


def _outcome(counts: Mapping[str, int]) -> CaseOutcome:
    if counts["graded"]:
        if counts["passed"] == counts["graded"]:
            return "pass"
        return "fail" if counts["passed"] == 0 else "flaky"
    if counts["pending"]:
        return "pending"
    return "failed" if counts["failed"] else "cancelled"


def _status(total: int, done: int, cancelled: int, started: bool) -> EvalStatus:
    if done >= total:
        return "cancelled" if cancelled else "finished"
    return "running" if started or done else "queued"


class _Spent:
    """A sum of usages without a model per step (tens of thousands of items add up fast)."""

    def __init__(self) -> None:
        self.input_tokens = self.output_tokens = self.unmeasured_tokens = 0
        self.cost_usd = 0.0
        self.sources: set[str | None] = set()

    def add(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.unmeasured_tokens += usage.unmeasured_tokens
        self.cost_usd += usage.cost_usd
        if usage.tokens or usage.cost_usd:
            self.sources.add(usage.source)

    def usage(self) -> Usage:
        """The sum, its source the parts' one source (null when they differ), as `Usage.__add__`."""
        source = next(iter(self.sources)) if len(self.sources) == 1 else None
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=round(self.cost_usd, 6),
            source=source if self.sources else "agent",
            unmeasured_tokens=self.unmeasured_tokens,
        )
