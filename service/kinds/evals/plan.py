"""How big an evaluation must be to see a difference: cases and repeats for a stated power.

`tunefleet eval plan` answers "how many repeats and cases do I need to detect a change of D points in
the pass rate?" from the per-case pass rates an ended evaluation observed. The model is the one the
comparison of two evaluations reads: every case is run `repeats` times on each version, runs are
independent, and a version's pass rate is the mean over cases. Under a change of `difference` in every
case's chance (clipped to [0, 1]), the variance of the measured difference with `cases` cases drawn like
the observed ones and `repeats` repeats is

    (mean over cases of p(1 - p) + q(1 - q)) / (cases x repeats),   q = p + difference,

and a two-sided test at level `alpha` detects the change with probability `power` once the difference
is (z(1 - alpha/2) + z(power)) standard errors (the normal approximation; Fleiss, Levin and Paik,
"Statistical Methods for Rates and Proportions", 3rd ed., ch. 4). Pairing cases removes the spread
between cases, not the runs' own variance, which is what this counts: so the plan holds for a fixed
set of cases, and under-counts for a claim about cases not yet written. A case that always passes or
always fails (p(1 - p) = 0) needs no repeat of its own; flaky cases are what the repeats are for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field

REPEATS_SHOWN = (1, 2, 3, 5, 10, 20)


class PlanRow(BaseModel):
    """Cases needed at one number of repeats."""

    model_config = ConfigDict(extra="forbid")

    repeats: int
    cases: int = Field(description="Cases needed (drawn like the observed ones) at this many repeats.")
    runs: int = Field(description="Graded runs in all: cases x repeats x 2 versions.")


class Plan(BaseModel):
    """An evaluation plan: cases needed at each number of repeats to detect `difference`."""

    model_config = ConfigDict(extra="forbid")

    difference: float
    power: float
    alpha: float
    observed_cases: int
    run_variance: float = Field(description="The mean of p(1 - p) + q(1 - q) over the observed cases.")
    rows: list[PlanRow]


def plan(
    rates: Sequence[float],
    difference: float,
    power: float = 0.8,
    alpha: float = 0.05,
    repeats: Sequence[int] = REPEATS_SHOWN,
) -> Plan:
    """Cases needed at each count of `repeats` to detect `difference` with `power` at level `alpha`, from
    observed per-case pass rates; ValueError naming the argument when one is out of range."""
    if not rates:
        raise ValueError("rates: no case has a graded run to plan from")
    if not 0 < abs(difference) <= 1:
        raise ValueError(f"difference: {difference} is not a change of pass rate in (0, 1]")
    if not 0.5 <= power < 1:
        raise ValueError(f"power: {power} is not in [0.5, 1)")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: {alpha} is not in (0, 1)")
    variance = sum(_run_variance(p, difference) for p in rates) / len(rates)
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    rows = []
    for r in repeats:
        cases = max(1, math.ceil(z * z * variance / (r * difference * difference)))
        rows.append(PlanRow(repeats=r, cases=cases, runs=2 * cases * r))
    return Plan(
        difference=difference,
        power=power,
        alpha=alpha,
        observed_cases=len(rates),
        run_variance=variance,
        rows=rows,
    )


def _run_variance(p: float, difference: float) -> float:
    q = min(1.0, max(0.0, p + difference))
    return p * (1 - p) + q * (1 - q)
