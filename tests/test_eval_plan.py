"""`tunefleet eval plan`: the cases and repeats it asks for detect the stated change with the stated power,
checked by simulating evaluations of that size; and the command reads an ended evaluation's rates."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest

from service.kinds.evals.plan import plan

RATES = [0.85] * 12 + [0.1] * 6 + [0.5] * 4
"""Per-case pass rates like a noisy world's: steady passers, cases that need a rule, coin flips."""


def simulated_power(rates: list[float], difference: float, cases: int, repeats: int, draws: int) -> float:
    """The share of `draws` simulated evaluations (cases drawn from `rates`, each run `repeats` times on
    both versions) in which a two-sided test at 0.05 sees the change."""
    rng = random.Random(20261207)
    z = NormalDist().inv_cdf(0.975)
    variance = sum(p * (1 - p) + min(1, p + difference) * (1 - min(1, p + difference)) for p in rates)
    se = math.sqrt(variance / len(rates) / (cases * repeats))
    seen = 0
    for _ in range(draws):
        total = 0.0
        for _ in range(cases):
            p = rng.choice(rates)
            q = min(1.0, p + difference)
            before = sum(rng.random() < p for _ in range(repeats))
            after = sum(rng.random() < q for _ in range(repeats))
            total += (after - before) / repeats
        seen += abs(total / cases) > z * se
    return seen / draws


@pytest.mark.parametrize("repeats", [1, 5])
def test_the_planned_size_detects_the_change_with_the_stated_power(repeats: int) -> None:
    """At the planned number of cases, 2,000 simulated evaluations see a 10-point change in 80 % of them,
    within 0.05 (4.4 standard errors of 2,000 draws, plus the normal approximation's own error)."""
    made = plan(RATES, 0.10, power=0.8, alpha=0.05, repeats=[repeats])
    cases = made.rows[0].cases
    assert made.rows[0].runs == 2 * cases * repeats
    power = simulated_power(RATES, 0.10, cases, repeats, draws=2000)
    assert abs(power - 0.8) <= 0.05, f"{cases} cases x {repeats} repeats: simulated power {power:.3f}"


def test_more_repeats_need_fewer_cases_and_a_smaller_change_needs_more() -> None:
    """The plan falls with repeats and grows as the change to detect shrinks (by its square)."""
    wide = plan(RATES, 0.10)
    fine = plan(RATES, 0.05)
    cases = [row.cases for row in wide.rows]
    assert cases == sorted(cases, reverse=True) and cases[0] > cases[-1]
    assert 3.5 <= fine.rows[0].cases / wide.rows[0].cases <= 4.5


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (([], 0.1), "rates"),
        (([0.5], 0.0), "difference"),
        (([0.5], 1.5), "difference"),
        (([0.5], 0.1, 0.3), "power"),
        (([0.5], 0.1, 0.8, 0.0), "alpha"),
    ],
)
def test_bad_plan_values_are_refused_naming_the_argument(args: tuple[object, ...], named: str) -> None:
    """Each out-of-range argument is refused with its name."""
    with pytest.raises(ValueError, match=named):
        plan(*args)  # type: ignore[arg-type]
