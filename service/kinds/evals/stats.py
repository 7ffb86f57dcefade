"""The statistics of an evaluation: pure functions of counts, no I/O.

- `wilson(passed, graded)`: a pass rate and its 95 % Wilson score interval (Wilson 1927; method 3 of
  Newcombe 1998, "Two-sided confidence intervals for the single proportion"). Chosen over the Wald
  interval, which collapses to a point at 0 % and 100 % and covers badly for the small counts an
  evaluation often has; the score interval stays inside [0, 1] and covers close to 95 % down to a
  handful of items.
- `mcnemar_exact(gained, lost)`: the exact (conditional) McNemar test: under "no difference" each
  discordant pair is a fair coin, so the two-sided p-value is twice the smaller binomial tail of
  Bin(gained + lost, 1/2), capped at 1.
- `paired_difference(...)`: the difference of two paired pass rates (after minus before) and its
  95 % interval by Newcombe's method 10 (Newcombe 1998, "Improved confidence intervals for the
  difference between binomial proportions based on paired data"): the Wilson interval of each
  side, squared and added with the correction for the correlation of the pairs (phi). Chosen
  because it has a closed form (a comparison of 10,000 items costs microseconds), never leaves
  [-1, 1], keeps close to 95 % coverage with few discordant pairs where the Wald interval does not,
  and is one of the intervals Fagerland, Lydersen and Laake (2014) recommend for paired proportions.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95 % interval."""


class Rate(BaseModel):
    """A pass rate with its 95 % Wilson interval (all 0 when nothing was graded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: NonNegativeInt
    graded: NonNegativeInt
    rate: NonNegativeFloat = Field(le=1, description="passed / graded (0 when nothing was graded).")
    low: NonNegativeFloat = Field(le=1, description="The lower end of the 95 % Wilson interval.")
    high: NonNegativeFloat = Field(le=1, description="The upper end of the 95 % Wilson interval.")


class Difference(BaseModel):
    """The difference of two paired pass rates (after minus before) with its 95 % interval."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    difference: float = Field(ge=-1, le=1)
    low: float = Field(ge=-1, le=1)
    high: float = Field(ge=-1, le=1)
    method: str = "Newcombe method 10 (Wilson score, paired)"


def wilson_bounds(passed: int, graded: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of `passed` out of `graded` ((0, 0) when nothing was graded)."""
    if graded < 0 or passed < 0 or passed > graded:
        raise ValueError(f"wilson: {passed} passed of {graded} graded is not a count")
    if graded == 0:
        return 0.0, 0.0
    p = passed / graded
    z2 = z * z
    centre = (p + z2 / (2 * graded)) / (1 + z2 / graded)
    half = z * math.sqrt(p * (1 - p) / graded + z2 / (4 * graded * graded)) / (1 + z2 / graded)
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == graded else min(1.0, centre + half)
    return low, high


def wilson(passed: int, graded: int) -> Rate:
    """`passed / graded` with its 95 % Wilson interval."""
    low, high = wilson_bounds(passed, graded)
    return Rate(passed=passed, graded=graded, rate=passed / graded if graded else 0.0, low=low, high=high)


def binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Bin(n, 1/2), exact in integers (then one division)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    total = 0
    term = 1  # C(n, 0)
    for i in range(k + 1):
        total += term
        term = term * (n - i) // (i + 1)
    return total / (1 << n)


def mcnemar_exact(gained: int, lost: int) -> float:
    """The two-sided exact McNemar p-value for `gained` (fail -> pass) and `lost` (pass -> fail)
    discordant pairs: 1.0 when there are none."""
    if gained < 0 or lost < 0:
        raise ValueError(f"mcnemar: discordant counts {gained} and {lost} must not be negative")
    n = gained + lost
    if n == 0:
        return 1.0
    return min(1.0, 2 * binomial_cdf_half(min(gained, lost), n))


def paired_difference(both: int, lost: int, gained: int, neither: int) -> Difference:
    """The difference `after - before` of paired pass rates and its 95 % interval (Newcombe's
    method 10). The pairs: `both` passed on both sides, `lost` passed before only, `gained` passed
    after only, `neither` passed on no side."""
    counts = (both, lost, gained, neither)
    if min(counts) < 0:
        raise ValueError(f"paired difference: counts {counts} must not be negative")
    n = sum(counts)
    if n == 0:
        return Difference(difference=0.0, low=0.0, high=0.0)
    before, after = both + lost, both + gained
    p_before, p_after = before / n, after / n
    low_b, high_b = wilson_bounds(before, n)
    low_a, high_a = wilson_bounds(after, n)
    phi = _phi(both, lost, gained, neither)
    diff = p_after - p_before
    down_a, up_a = p_after - low_a, high_a - p_after
    down_b, up_b = p_before - low_b, high_b - p_before
    low = diff - math.sqrt(max(0.0, down_a**2 - 2 * phi * down_a * up_b + up_b**2))
    high = diff + math.sqrt(max(0.0, up_a**2 - 2 * phi * up_a * down_b + down_b**2))
    return Difference(difference=diff, low=max(-1.0, low), high=min(1.0, high))


def _phi(both: int, lost: int, gained: int, neither: int) -> float:
    """The correlation of the two sides' outcomes, with Newcombe's continuity correction (0 when a
    margin is empty)."""
    n = both + lost + gained + neither
    margins = (both + lost) * (gained + neither) * (both + gained) * (lost + neither)
    if margins == 0:
        return 0.0
    cross = both * neither - lost * gained
    if cross > n / 2:
        corrected = cross - n / 2
    elif cross < 0:
        corrected = float(cross)
    else:
        corrected = 0.0
    return corrected / math.sqrt(margins)
