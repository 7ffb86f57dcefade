"""`tunefleet eval compare A B`: evaluation B against evaluation A, case by case.

Each case graded on both sides is one pair. With one repeat a case passes on a side when its item
passed; with more, when most of its graded repeats passed (a tie does not pass): the repeats of one
case are not independent of each other, so they make one pair, never several, and do not inflate the
test. The pairs give the flips (fail -> pass gained, pass -> fail lost), the exact McNemar p-value on
the discordant pairs and the difference of the paired pass rates (B - A) with Newcombe's interval
(service.evals.stats). Each side's own pass rate (over its items) and its cost are reported beside.
"""

from __future__ import annotations

from service.evals.models import Comparison, EvalResults, Flip, Side
from service.evals.stats import mcnemar_exact, paired_difference


def case_passes(passed: int, graded: int) -> bool:
    """Whether a case passes on one side: most of its graded repeats passed."""
    return 2 * passed > graded


def compare(before: EvalResults, after: EvalResults) -> Comparison:
    """`after` against `before`, pair by pair."""
    fractions_before = {row.case: row for row in before.cases if row.graded}
    both = neither = 0
    flips: list[Flip] = []
    unpaired = sorted(set(fractions_before) ^ {row.case for row in after.cases if row.graded})
    for row in after.cases:
        earlier = fractions_before.get(row.case)
        if earlier is None or not row.graded:
            continue
        was = case_passes(earlier.passed, earlier.graded)
        now = case_passes(row.passed, row.graded)
        if was and now:
            both += 1
        elif not was and not now:
            neither += 1
        else:
            flips.append(
                Flip(
                    case=row.case,
                    before=earlier.passed / earlier.graded,
                    after=row.passed / row.graded,
                    direction="gained" if now else "lost",
                )
            )
    gained = sum(1 for flip in flips if flip.direction == "gained")
    lost = len(flips) - gained
    return Comparison(
        before=_side(before),
        after=_side(after),
        pairs=both + neither + len(flips),
        both=both,
        neither=neither,
        gained=gained,
        lost=lost,
        flips=sorted(flips, key=lambda f: (f.direction, f.case)),
        mcnemar_p=mcnemar_exact(gained, lost),
        difference=paired_difference(both=both, lost=lost, gained=gained, neither=neither),
        unpaired=unpaired,
    )


def _side(results: EvalResults) -> Side:
    return Side(
        id=results.id,
        version=results.version,
        rate=results.rate,
        tokens=results.usage.tokens,
        cost_usd=results.usage.cost_usd,
    )
