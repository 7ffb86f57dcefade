"""The evaluation's statistics give the values published for them (service/kinds/evals/stats.py)."""

from __future__ import annotations

import pytest

from service.kinds.evals.stats import binomial_cdf_half, mcnemar_exact, paired_difference, wilson


@pytest.mark.parametrize(
    ("passed", "graded", "low", "high"),
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_matches_newcombes_published_examples(
    passed: int, graded: int, low: float, high: float
) -> None:
    """The 95 % Wilson interval equals the score intervals Newcombe (1998, Stat Med 17:857, table II)
    gives for these counts, to his four decimals."""
    rate = wilson(passed, graded)
    assert rate.rate == pytest.approx(passed / graded)
    assert round(rate.low, 4) == low
    assert round(rate.high, 4) == high


def test_wilson_interval_of_all_passed_reaches_one() -> None:
    """20 of 20 passed mirrors 0 of 20: the interval is [0.8389, 1], 1 included."""
    rate = wilson(20, 20)
    assert (round(rate.low, 4), rate.high) == (0.8389, 1.0)


def test_nothing_graded_is_a_zero_rate_not_an_error() -> None:
    """An evaluation with no graded item has rate 0 and the empty interval [0, 0]."""
    assert wilson(0, 0).model_dump() == {"passed": 0, "graded": 0, "rate": 0.0, "low": 0.0, "high": 0.0}


def test_impossible_counts_are_refused() -> None:
    """More passed than graded is a defect of the caller, refused with the counts named."""
    with pytest.raises(ValueError, match="3 passed of 2 graded"):
        wilson(3, 2)


@pytest.mark.parametrize(
    ("gained", "lost", "p_value"),
    [
        (7, 1, 0.0703),  # airway hyper-responsiveness (Bentur 2009): Fagerland et al. 2013, exact 0.070
        (6, 16, 0.0525),  # complete response (Cavo 2012): Fagerland, Lydersen, Laake 2017, exact 0.052
        (0, 0, 1.0),
        (3, 3, 1.0),
        (0, 5, 0.0625),  # 2 / 2**5
    ],
)
def test_exact_mcnemar_matches_published_p_values(gained: int, lost: int, p_value: float) -> None:
    """The exact conditional McNemar p-value equals the published one for these discordant counts."""
    assert mcnemar_exact(gained, lost) == pytest.approx(p_value, abs=5e-5)
    assert mcnemar_exact(lost, gained) == mcnemar_exact(gained, lost)


def test_binomial_tail_is_exact_for_large_counts() -> None:
    """The tail of Bin(1000, 1/2) is summed in integers: P(X <= 500) = 1/2 + C(1000, 500) / 2**1001."""
    from math import comb

    assert binomial_cdf_half(500, 1000) == pytest.approx(0.5 + comb(1000, 500) / 2**1001, rel=1e-12)


def test_paired_difference_matches_the_published_newcombe_interval() -> None:
    """For Cavo et al.'s paired table (59, 6, 16, 80) the Newcombe square-and-add interval is
    -0.0621 (-0.1186 to -0.0046), as Fagerland, Lydersen and Laake publish it."""
    diff = paired_difference(both=59, lost=16, gained=6, neither=80)
    assert round(diff.difference, 4) == -0.0621
    assert (round(diff.low, 4), round(diff.high, 4)) == (-0.1186, -0.0046)


def test_paired_difference_stays_within_bounds() -> None:
    """Every pair gained: the difference is 1 and the interval never leaves [-1, 1]."""
    diff = paired_difference(both=0, lost=0, gained=12, neither=0)
    assert diff.difference == 1.0
    assert -1.0 <= diff.low <= diff.high == 1.0
    assert paired_difference(0, 0, 0, 0).difference == 0.0
