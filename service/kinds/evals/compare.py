"""`tunefleet eval compare A B`: evaluation B against evaluation A, case by case.

Each case graded on both sides is one pair. With one repeat a case passes on a side when its item
passed; with more, when most of its graded repeats passed (a tie does not pass): the repeats of one
case are not independent of each other, so they make one pair, never several, and do not inflate the
test. The pairs give the flips (fail -> pass gained, pass -> fail lost), the exact McNemar p-value on
the discordant pairs and the difference of the paired pass rates (B - A) with Newcombe's interval
(service.kinds.evals.stats). Each side's own pass rate (over its items) and its cost are reported beside,
and one sentence says whether the difference is beyond chance (`chance_line`).
"""

from __future__ import annotations

from service.kinds.evals.models import Chance, Comparison, EvalResults, Flip, Side
from service.kinds.evals.stats import mcnemar_exact, paired_difference

LEVEL = 0.05
"""A difference is beyond chance when the exact McNemar p-value is below this and the difference's 95 %
interval leaves 0 out: the two may disagree at the edge (one is a test of the discordant pairs, the
other an interval of the difference), and a claim needs both."""


def chance_of(comparison: Comparison) -> Chance:
    """Whether B is better or worse than A beyond chance, or the difference is within chance."""
    diff = comparison.difference
    if comparison.pairs == 0:
        return "no-pairs"
    if comparison.mcnemar_p < LEVEL and diff.low > 0:
        return "better"
    if comparison.mcnemar_p < LEVEL and diff.high < 0:
        return "worse"
    return "within-chance"


def chance_line(comparison: Comparison, before: str = "A", after: str = "B") -> str:
    """One sentence: is the difference beyond chance, with the figures that say so."""
    diff = comparison.difference
    # With repeats the pairs are cases passing most of their repeats, whose share may move otherwise
    # than the pass rates over items beside it: the figure says which it is.
    repeated = max(comparison.before.rate.graded, comparison.after.rate.graded) > comparison.pairs
    of_what = " in cases passing most of their repeats" if repeated else ""
    figures = (
        f"{100 * diff.difference:+.1f} points{of_what}, 95 % CI {100 * diff.low:+.1f} to "
        f"{100 * diff.high:+.1f}; exact McNemar p = {comparison.mcnemar_p:.4g} over {comparison.pairs} "
        "paired cases"
    )
    chance = chance_of(comparison)
    if chance == "no-pairs":
        return f"No case was graded on both sides: {before} and {after} cannot be compared."
    if chance == "within-chance":
        split = ""
        if diff.low > 0 or diff.high < 0:  # the interval leaves 0 out; the exact test does not agree
            flips = comparison.gained + comparison.lost
            split = (
                f"; the interval leaves 0 out, but the exact test over {flips} flipped "
                f"case{'s' if flips != 1 else ''} does not, and a claim needs both"
            )
        return (
            f"The difference is within chance ({figures}{split}): {after} is not shown better or worse "
            f"than {before}."
        )
    return f"{after} is {chance} than {before} beyond chance ({figures})."


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
    found = Comparison(
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
    return found.model_copy(update={"chance": chance_of(found)})


def _side(results: EvalResults) -> Side:
    return Side(
        id=results.id,
        version=results.version,
        rate=results.rate,
        tokens=results.usage.tokens,
        cost_usd=results.usage.cost_usd,
    )
