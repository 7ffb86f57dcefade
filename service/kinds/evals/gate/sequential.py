"""The `test` rule of the acceptance gate: a group-sequential non-inferiority test on paired runs with
both error rates bounded, pure functions of counts (no I/O), so that the gate, the tests and a benchmark
share one decision rule.

The data: pairs of graded runs of one gate case, one on the candidate's base version and one on the
candidate (the same case, the same repeat number). A pair is `lost` (the base passed, the candidate
failed), `gained` (the other way round) or even. The pairs' mean difference estimates the change of
the pass rate over the gate's cases, Delta = p(candidate) - p(base).

The hypotheses: H0, the candidate lowers the pass rate by `min_effect` or more (Delta <= -min_effect);
H1, it is harmless (Delta >= 0). Two errors are bounded, over all the rounds:
- `alpha`: how often a candidate whose drop is `min_effect` or more is published;
- `beta`: how often a harmless candidate is rejected (when the fleet can run the planned pairs).

The statistic after each round (a *look*): z = (mean + min_effect) / se, se the standard error of the
mean difference from the pairs' sample variance, that variance never taken below
min_effect * (1 - min_effect) (no distribution on {-1, 0, 1} with mean -min_effect has less: a world
without chance, where every pair agrees, cannot claim a variance of 0), read through Student's t.

The design (Jennison and Turnbull 2000, "Group Sequential Methods with Applications to Clinical
Trials", ch. 7.3, one-sided tests with error spending for both errors): an upper bound c_k spends alpha
under Delta = -min_effect by the rho-family spending function alpha(t) = alpha t^rho, rho = 2 (the
error-spending approach of Lan and DeMets 1983, Biometrika 70:659), ignoring the lower bound
(non-binding: alpha holds whether or not the lower bound is obeyed); a lower bound a_k spends beta the
same way under Delta = 0, where z drifts by min_effect sqrt(I_k), I_k the information 1 / se^2. The
most information the test needs, I_max, is the one at which the two bounds meet at the last look
(planned for PLAN_LOOKS equal looks, `drift`); in pairs, I_max times the variance of a harmless pair,
2 p (1 - p) with p the base's pass rate over every base run so far (the base's runs are shared by every
gate on that base), erring toward more pairs while they are few (`planned_pairs`), floored as above.
The look's information fraction is t = pairs / planned pairs; at t >= 1 (or when no round may follow)
the last bound is the upper one, which spends all alpha left, and an answer is given: z >= c
publishes, anything less rejects. Both bounds come from the recursion of Armitage, McPherson and Rowe
(1969; Jennison and Turnbull ch. 19) for the score S_k = Z_k sqrt(t_k), whose increments are
independent normal (tests/test_gate_sequential.py checks the upper bounds against scipy's
multivariate normal and both error rates by simulation). rho = 2 rather than Pocock-type spending: the
first look comes after one run of each case, a few percent of the plan, where Pocock-type spending
spends 8 % of each error and the test can tell nothing (measured: 13 % of harmless candidates
rejected at beta 0.1); rho = 2 spends 0.3 % there.

So an undecided candidate at the last look is decided by the design, not rejected by default. When
the gate's cases times `max_repeats` are fewer pairs than planned, the last look comes early (t < 1):
alpha still holds, beta does not (docs/gate-statistics.md gives the figures). The gate runs enough
repeats per case to reach the plan (workers.kinds.evals.gate.evaluate), so this is the case only for a
gate with very few cases.

Why this test (docs/gate-statistics.md): exact paired tests (McNemar's) test Delta = 0, not a margin; a
beta-binomial posterior states no frequentist error rate; a truncated SPRT needs the same recursion to
know its error rates under truncation, and rounds of many runs at once (the fleet's unit) are what a
group-sequential design is built for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.kinds.evals.gate.boundaries import BOUND_HIGH, FRACTION_DIGITS, Z_CAP, bounds, drift, futility
from service.kinds.evals.gate.models import Decision, TestOutcome


@dataclass(frozen=True)
class Pairs:
    """The paired runs of a gate so far; `base_passed`: pairs whose base run passed."""

    pairs: int
    lost: int
    gained: int
    base_passed: int = 0

    def __post_init__(self) -> None:
        if (
            min(self.pairs, self.lost, self.gained, self.base_passed) < 0
            or self.lost + self.gained > self.pairs
            or self.base_passed > self.pairs
        ):
            raise ValueError(
                f"pairs: {self.lost} lost, {self.gained} gained and {self.base_passed} base passes of "
                f"{self.pairs} is not a count"
            )

    @property
    def difference(self) -> float:
        return (self.gained - self.lost) / self.pairs if self.pairs else 0.0


@dataclass(frozen=True)
class Plan:
    """The test's settings: its two error rates, the drop it guards against, and the most pairs the
    fleet may run (the gate's cases times `max_repeats`)."""

    alpha: float
    beta: float
    min_effect: float
    max_pairs: int

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha {self.alpha}: expected a level in (0, 0.5)")
        if not 0 < self.beta < 0.5:
            raise ValueError(f"beta {self.beta}: expected a level in (0, 0.5)")
        if not 0 < self.min_effect < 1:
            raise ValueError(f"min_effect {self.min_effect}: expected a drop in (0, 1)")
        if self.max_pairs < 1:
            raise ValueError(f"max_pairs {self.max_pairs}: expected 1 or more")


def planned_pairs(plan: Plan, counts: Pairs) -> int:
    """The pairs the design needs: I_max times the variance of a harmless pair, 2 p (1 - p) with p the
    base's pass rate over these pairs (Laplace's rule: one pass and one fail added), moved toward 1/2
    by one standard error, floored at min_effect (1 - min_effect). With few pairs the plan errs toward
    more: a plan too small makes the early lower bounds expect more drift than a harmless candidate
    has, and reject it too often."""
    rate = (counts.base_passed + 1) / (counts.pairs + 2)
    shrink = math.sqrt(rate * (1 - rate) / (counts.pairs + 2))
    p = max(0.5, rate - shrink) if rate >= 0.5 else min(0.5, rate + shrink)
    variance = max(2 * p * (1 - p), plan.min_effect * (1 - plan.min_effect))
    return max(1, math.ceil((drift(plan.alpha, plan.beta) / plan.min_effect) ** 2 * variance))


def standard_error(counts: Pairs, min_effect: float) -> float:
    """The mean difference's standard error, its variance floored at min_effect * (1 - min_effect)."""
    n = counts.pairs
    mean = counts.difference
    variance = ((counts.lost + counts.gained) - n * mean * mean) / (n - 1) if n > 1 else 1.0
    return math.sqrt(max(variance, min_effect * (1 - min_effect)) / n)


def _as_normal(t: float, pairs: int) -> float:
    """The normal score with the tail of Student's t with pairs - 1 degrees of freedom at `t`: the
    variance is estimated, and with few pairs the z statistic's tails are wider than the normal's."""
    from scipy import stats

    if pairs < 2:
        return 0.0
    z = float(stats.norm.isf(stats.t.sf(t, pairs - 1)))
    return min(max(z, -Z_CAP), Z_CAP)


def _t_bound(bound: float, pairs: int) -> float:
    """The bound on the t scale: (difference + min_effect) / se at or above it is z at or above `bound`."""
    from scipy import stats

    if pairs < 2:
        return math.inf
    return float(stats.t.isf(stats.norm.sf(bound), pairs - 1))


def _looks(plan: Plan, history: list[Pairs], planned: int) -> tuple[list[Pairs], tuple[float, ...]]:
    """The looks of `history` and their information fractions: a round that added no graded pair is not
    a look (nor one past the planned pairs)."""
    looks: list[Pairs] = []
    fractions: list[float] = []
    for counts in history:
        fraction = round(min(counts.pairs / planned, 1.0), FRACTION_DIGITS)
        if counts.pairs > 0 and fraction > (fractions[-1] if fractions else 0.0):
            looks.append(counts)
            fractions.append(fraction)
    return looks, tuple(fractions)


def decide(plan: Plan, history: list[Pairs], *, last: bool) -> TestOutcome:
    """The test's answer after the looks in `history` (cumulative counts after each round, oldest
    first); `last`: no round may follow (the answer is then never `open`)."""
    planned = planned_pairs(plan, history[-1]) if history else 1
    looks, fractions = _looks(plan, history, planned)
    if not looks:  # nothing graded yet: nothing is known
        return TestOutcome(
            decision="rejected" if last else "open",
            look=1,
            pairs=0,
            lost=0,
            gained=0,
            difference=0.0,
            statistic=0.0,
            bound=BOUND_HIGH,
            futility=-BOUND_HIGH,
            lower=-1.0,
            fraction=0.0,
            planned_pairs=planned,
            stopped_early=False,
        )
    final = last or fractions[-1] >= 1.0
    upper = bounds(fractions, plan.alpha, final)
    bound = upper[-1]
    shift = drift(plan.alpha, plan.beta)
    floor = bound if final else min(bound, futility(fractions, upper, plan.beta, shift, False)[-1])
    now = looks[-1]
    se = standard_error(now, plan.min_effect)
    z = _as_normal((now.difference + plan.min_effect) / se, now.pairs)
    decision: Decision = "passed" if z >= bound else "rejected" if z <= floor or final else "open"
    return TestOutcome(
        decision=decision,
        look=len(looks),
        pairs=now.pairs,
        lost=now.lost,
        gained=now.gained,
        difference=now.difference,
        statistic=z,
        bound=bound,
        futility=floor,
        lower=max(-1.0, now.difference - _t_bound(bound, now.pairs) * se),  # a difference is >= -1
        fraction=fractions[-1],
        planned_pairs=planned,
        stopped_early=decision != "open" and not final,
    )
