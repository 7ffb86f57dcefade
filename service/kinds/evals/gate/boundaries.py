"""The boundaries of the gate's `test` rule (service.kinds.evals.gate.sequential): the error-spending
function, and the upper (alpha) and lower (beta) bounds of a group-sequential design at given
information fractions, computed by the recursion of Armitage, McPherson and Rowe (1969; Jennison and
Turnbull 2000, "Group Sequential Methods with Applications to Clinical Trials", ch. 19) on a grid, with
scipy's normal distribution and root finder. Pure functions of numbers, cached.

numpy and scipy are imported by the functions that use them, on a gate's first look: every worker
imports the gate's code, but only a worker whose gate runs the `test` rule needs them, and they add
about 75 MiB to a process (`bench memory`, a worker with 200 cases in flight: 171 MiB with them, 96
without)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

BOUND_HIGH = 12.0
"""Bounds are sought in [-BOUND_HIGH, BOUND_HIGH]: a look that spends (next to) nothing gets BOUND_HIGH."""
Z_CAP = 40.0
"""Statistics are kept within [-Z_CAP, Z_CAP] (an agreement so complete that the tail underflows)."""
FRACTION_DIGITS = 6
"""Information fractions are rounded to this many digits (so that bounds are cached and reproducible)."""
PLAN_LOOKS = 5
"""The looks the design is planned for (equally spaced); the gate's rounds are sized to about this."""


SPENDING_RHO = 2.0
"""The power of the spending function level * t^rho (Jennison and Turnbull's rho family, 7.3)."""


def spent(level: float, fraction: float) -> float:
    """The error spent by information fraction `fraction`: level * t^SPENDING_RHO."""
    return level * float(min(max(fraction, 0.0), 1.0) ** SPENDING_RHO)


GRID_POINTS = 401
"""Points of the grid on which the recursion integrates the score's density at each look."""
GRID_SDS = 10.0
"""The grid reaches this many standard deviations below 0 (the mass below it is under 1e-23)."""


def _crossing(
    density: np.ndarray, grid: np.ndarray, b: float, step_var: float, shift: float, upper: bool
) -> float:
    """P(continued to the last look and the next score is at or above `b` (upper) or at or below it),
    the step's mean being `shift`, by the trapezoid rule."""
    import numpy as np
    from scipy import special

    sd = math.sqrt(step_var)
    sign = -1.0 if upper else 1.0  # scipy.special.ndtr, the normal cdf: sf(x) = ndtr(-x)
    if grid.size == 0:
        return float(special.ndtr(sign * (b - shift) / sd))
    return float(np.trapezoid(density * special.ndtr(sign * (b - grid - shift) / sd), grid))


_ROOT_TWO_PI = math.sqrt(2 * math.pi)


def _normal_density(x: np.ndarray, sd: float) -> np.ndarray:
    """The density of N(0, sd^2) at `x`, in numpy: the kernel is 401 x 401 points a look, and scipy's
    `norm.pdf` (checked equal in tests/test_gate_sequential.py) spends three times as long on its
    argument checks as on the arithmetic."""
    import numpy as np

    out: np.ndarray = np.square(x)
    out *= -0.5 / (sd * sd)
    np.exp(out, out=out)
    out *= 1 / (sd * _ROOT_TWO_PI)
    return out


def _next_density(
    density: np.ndarray, grid: np.ndarray, new: np.ndarray, step_var: float, shift: float
) -> np.ndarray:
    """The score's sub-density on `new` given it continued at the look of `grid`."""
    import numpy as np

    sd = math.sqrt(step_var)
    if grid.size == 0:
        return _normal_density(new - shift, sd)
    kernel = _normal_density(new[:, None] - grid[None, :] - shift, sd)
    return np.asarray(kernel @ (density * _trapezoid_weights(grid)))


def _trapezoid_weights(grid: np.ndarray) -> np.ndarray:
    """w with w @ f == np.trapezoid(f, grid) for any f on `grid` (so a kernel integrates as one product)."""
    import numpy as np

    gaps = np.diff(grid)
    weights = np.zeros_like(grid)
    weights[:-1] += gaps / 2
    weights[1:] += gaps / 2
    return weights


def _solve(
    density: np.ndarray,
    grid: np.ndarray,
    step: tuple[float, float],
    upper: bool,
    increment: float,
    span: tuple[float, float],
) -> float:
    """The score's bound in `span` at which the chance of crossing first here (above it when `upper`,
    below it otherwise; `step`: the step's variance and mean) is `increment`, or the end of `span` that
    it does not reach (scipy.optimize.brentq)."""
    from scipy import optimize

    step_var, shift = step
    sign = -1.0 if upper else 1.0  # the crossing chance falls with the bound for an upper one

    def gap(b: float) -> float:
        return sign * (_crossing(density, grid, b, step_var, shift, upper) - increment)

    low, high = span
    if gap(low) >= 0:
        return low
    if gap(high) <= 0:
        return high
    return float(optimize.brentq(gap, low, high, xtol=1e-7))


@lru_cache(maxsize=1024)
def bounds(fractions: tuple[float, ...], alpha: float, last: bool) -> tuple[float, ...]:
    """Each look's upper bound on z (publish at or above), for looks at these increasing information
    fractions, alpha spent under the null (Delta = -min_effect, z's drift 0), the lower bound ignored
    (non-binding); `last`: the final look spends all of alpha that is left.

    The recursion of Armitage, McPherson and Rowe (1969; Jennison and Turnbull 2000, ch. 19) on the
    score S_k = Z_k sqrt(t_k), whose increments are independent normal with variance t_k - t_{k-1}:
    the score's density on the continuation region is carried from look to look on a grid, and each
    bound is the root (scipy.optimize.brentq) of "the chance of crossing first here equals the alpha
    this look spends"."""
    import numpy as np

    found: list[float] = []
    density = grid = np.zeros(0)
    previous_t = 0.0
    for k, t in enumerate(fractions):
        target = alpha if last and k == len(fractions) - 1 else spent(alpha, t)
        increment = target - (spent(alpha, fractions[k - 1]) if k else 0.0)
        step_var = t - previous_t
        top = BOUND_HIGH * math.sqrt(t)
        if increment <= 1e-12:
            b = top
        else:
            b = _solve(density, grid, (step_var, 0.0), True, increment, (-top, top))
        found.append(b / math.sqrt(t))
        new = np.linspace(-GRID_SDS * math.sqrt(t), b, GRID_POINTS)
        density = _next_density(density, grid, new, step_var, 0.0)
        grid, previous_t = new, t
    return tuple(found)


@lru_cache(maxsize=1024)
def futility(
    fractions: tuple[float, ...], upper: tuple[float, ...], beta: float, drift: float, meet: bool
) -> tuple[float, ...]:
    """Each look's lower bound on z (reject at or below), beta spent under the harmless alternative
    (Delta = 0: the score S_k = Z_k sqrt(t_k) drifts by `drift` t_k, drift = min_effect sqrt(I_max)),
    the upper bounds `upper` stopping the test too. A bound that would pass its upper one is the upper
    one (the test ends there). `meet`: the last look's bound is solved without that cap, spending all
    of beta left (the planning of `drift` asks where it meets the upper one)."""
    import numpy as np

    found: list[float] = []
    density = grid = np.zeros(0)
    previous_t = 0.0
    for k, t in enumerate(fractions):
        final = meet and k == len(fractions) - 1
        target = beta if final else spent(beta, t)
        increment = target - (spent(beta, fractions[k - 1]) if k else 0.0)
        step_var, shift = t - previous_t, drift * (t - previous_t)
        root_t = math.sqrt(t)
        top = BOUND_HIGH * root_t if final else upper[k] * root_t
        if increment <= 1e-12:
            a = -BOUND_HIGH * root_t
        else:
            a = _solve(density, grid, (step_var, shift), False, increment, (-BOUND_HIGH * root_t, top))
        found.append(a / root_t)
        if k < len(fractions) - 1:
            new = np.linspace(a, max(a, upper[k] * root_t), GRID_POINTS)
            density = _next_density(density, grid, new, step_var, shift)
            grid, previous_t = new, t
    return tuple(found)


@lru_cache(maxsize=64)
def drift(alpha: float, beta: float) -> float:
    """min_effect sqrt(I_max): the harmless alternative's drift at which, with PLAN_LOOKS equal looks,
    the lower bound of the last look meets its upper bound (then every look decides by the last).
    Without looks it is z_alpha + z_beta; the looks inflate it a little."""
    from scipy import optimize, stats

    fractions = tuple(round((k + 1) / PLAN_LOOKS, FRACTION_DIGITS) for k in range(PLAN_LOOKS))
    upper = bounds(fractions, alpha, True)
    fixed = float(stats.norm.isf(alpha) + stats.norm.isf(beta))

    def gap(value: float) -> float:
        return futility(fractions, upper, beta, value, True)[-1] - upper[-1]

    return float(optimize.brentq(gap, 0.8 * fixed, 2.0 * fixed, xtol=1e-6))
