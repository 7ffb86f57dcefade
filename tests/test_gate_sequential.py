"""The `test` rule's statistics (service/kinds/evals/gate/sequential.py) and the evaluation's hand-written
intervals, checked against scipy: the bounds spend alpha as the spending function says, both error
rates hold over 2,000 simulated decisions (a harmful candidate published at most alpha, a harmless one
rejected at most beta), and clear candidates stop early."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.core.models.acceptance import GateConfig
from service.kinds.evals.gate import boundaries, sequential
from service.kinds.evals.gate.boundaries import bounds, spent
from service.kinds.evals.gate.models import GateItem
from service.kinds.evals.gate.rule import judge, next_repeats
from service.kinds.evals.gate.sequential import Pairs, Plan, decide, planned_pairs
from service.kinds.evals.stats import mcnemar_exact, paired_difference, wilson_bounds

DECISIONS = 2000
"""Simulated decisions per scenario. The rate of publishing under the null has a standard error of
sqrt(alpha (1 - alpha) / DECISIONS) = 0.0049 at alpha 0.05; the tolerance is alpha + 3 standard
errors (0.0646), which a rule whose error rate truly is alpha exceeds with probability about 0.1 %.
Likewise the rate of rejecting a harmless candidate: beta + 3 standard errors (0.120 at beta 0.1)."""
ALPHA, BETA, MIN_EFFECT, MOST = 0.05, 0.1, 0.1, 100


SIMULATION_TIMEOUT_S = 900
"""2,000 sequential decisions of up to 8 looks, each look's bounds computed afresh: seconds on a quiet
machine, minutes on two cores shared with the fleet tests."""


def tolerance(level: float) -> float:
    return level + 3 * math.sqrt(level * (1 - level) / DECISIONS)


def first_crossing(found: tuple[float, ...], fractions: tuple[float, ...], k: int) -> float:
    """P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k), from scipy's multivariate normal."""
    t = np.array(fractions[: k + 1])
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    rng = np.random.default_rng(1)

    def below(n: int) -> float:
        if n == 1:
            return float(stats.norm.cdf(found[0]))
        limits = np.array(found[:n])
        value = stats.multivariate_normal.cdf(limits, cov=cov[:n, :n], abseps=1e-7, releps=1e-7, rng=rng)
        return float(value)

    return (below(k) if k else 1.0) - below(k + 1)


@pytest.mark.parametrize("fractions", [(0.25, 0.5, 0.75, 1.0), (0.1, 0.35, 0.6, 1.0), (0.5, 1.0)])
def test_each_bound_spends_what_the_spending_function_gives(fractions: tuple[float, ...]) -> None:
    """The grid recursion's bounds cross first at each look with the probability alpha(t_k) -
    alpha(t_{k-1}), as scipy's multivariate normal computes it, and spend all of alpha by the last."""
    alpha = 0.05
    found = bounds(fractions, alpha, True)
    for k, t in enumerate(fractions):
        wanted = (alpha if k == len(fractions) - 1 else spent(alpha, t)) - (
            spent(alpha, fractions[k - 1]) if k else 0.0
        )
        assert first_crossing(found, fractions, k) == pytest.approx(wanted, abs=2e-5)
    assert bounds((1.0,), alpha, True) == pytest.approx((stats.norm.isf(alpha),), abs=1e-6)


def simulate(
    base: np.ndarray,
    candidate: np.ndarray,
    seed: int,
    most: int = MOST,
    decisions: int = DECISIONS,
    min_effect: float = MIN_EFFECT,
) -> tuple[float, float, float]:
    """`decisions` gates as the fleet runs them: a first round of one run per case a side, then rounds
    sized by rule.next_repeats to the design's plan, up to `most` runs per case; the share published,
    the mean runs (both sides) per decision, and the share stopped before the last look."""
    rng = np.random.default_rng(seed)
    cases = base.size
    plan = Plan(alpha=ALPHA, beta=BETA, min_effect=min_effect, max_pairs=cases * most)
    published = runs = early = 0
    for _ in range(decisions):
        history: list[Pairs] = []
        lost = gained = pairs = base_passed = done = 0
        repeats = 1
        while True:
            b = rng.random((repeats, cases)) < base
            c = rng.random((repeats, cases)) < candidate
            lost += int((b & ~c).sum())
            gained += int((~b & c).sum())
            base_passed += int(b.sum())
            pairs += repeats * cases
            done += repeats
            history.append(Pairs(pairs, lost, gained, base_passed))
            outcome = decide(plan, history, last=done >= most)
            if outcome.decision != "open":
                break
            repeats = next_repeats(outcome, cases, done, 1, most)
        published += outcome.decision == "passed"
        early += outcome.stopped_early
        runs += 2 * pairs
    return published / decisions, runs / decisions, early / decisions


NOISY_BASE = np.random.default_rng(0).uniform(0.6, 0.95, 20)


@pytest.mark.parametrize(
    ("base", "candidate"),
    [
        (NOISY_BASE, NOISY_BASE - 0.1),  # flaky cases, every one 10 points worse on the candidate
        (np.ones(20), np.full(20, 0.9)),  # a sure base; the candidate fails 10 % of its runs
    ],
    ids=["flaky-cases", "sure-base"],
)
@pytest.mark.timeout(SIMULATION_TIMEOUT_S)
def test_a_harmful_candidate_is_published_at_most_alpha_over_2000_decisions(
    base: np.ndarray, candidate: np.ndarray
) -> None:
    """Under the null (the candidate lowers the pass rate by exactly min_effect, the hardest harmful case
    to tell), 2,000 sequential decisions with rounds sized to the plan publish at most alpha + 3
    standard errors of them (see DECISIONS)."""
    published, _, _ = simulate(base, candidate, seed=11)
    assert published <= tolerance(ALPHA)


@pytest.mark.parametrize(("cases", "seed"), [(20, 12), (5, 13)], ids=["20-cases", "5-cases"])
@pytest.mark.timeout(SIMULATION_TIMEOUT_S)
def test_a_harmless_candidate_is_rejected_at_most_beta_over_2000_decisions(cases: int, seed: int) -> None:
    """Under the harmless alternative (the candidate changes nothing; its flaky cases pass 60 to 95 % of
    their runs), 2,000 decisions reject at most beta + 3 standard errors of them (see DECISIONS), with
    20 gate cases and with 5 (these run more repeats per case rather than rejecting); none is left
    undecided by default."""
    base = NOISY_BASE[:cases]
    published, _, _ = simulate(base, base, seed=seed)
    assert 1 - published <= tolerance(BETA)


def test_the_plan_grows_with_the_bases_noise_and_the_drift_it_must_tell() -> None:
    """The planned pairs are more for a base that passes half its runs than for one that passes 90 %,
    and fewer for a wider min_effect; a base that always passes still needs some (the variance floor)."""
    plan = Plan(ALPHA, BETA, MIN_EFFECT, 10_000)
    half, sure_ish, sure = (planned_pairs(plan, Pairs(100, 0, 0, n)) for n in (50, 90, 100))
    assert half > sure_ish > sure > 0
    assert planned_pairs(Plan(ALPHA, BETA, 0.2, 10_000), Pairs(100, 0, 0, 50)) < half / 3


@pytest.mark.timeout(SIMULATION_TIMEOUT_S)
def test_clear_candidates_stop_early_and_cost_few_runs() -> None:
    """A candidate that changes nothing in a world without chance is published at an early look; one
    that fails half of what passed is rejected at its first or second look (published at most 0.5 % of
    2,000 times); each costs far fewer runs than the plan's most."""
    _, fine_runs, fine_early = simulate(np.ones(20), np.ones(20), seed=3, decisions=200)
    assert fine_early == 1.0 and fine_runs <= 200
    published, harm_runs, harm_early = simulate(np.full(20, 0.9), np.full(20, 0.45), seed=5)
    assert published <= 0.005 and harm_early == 1.0 and harm_runs <= 200


def test_an_open_test_asks_for_another_round_and_the_last_round_decides() -> None:
    """With rounds left, evidence that is not yet conclusive leaves the answer open and the next round is
    sized to the plan; the same evidence when no round may follow rejects (it did not rule out the
    drop), and nothing graded at all rejects."""
    plan = Plan(ALPHA, BETA, MIN_EFFECT, 2000)
    history = [Pairs(20, 3, 2, 16)]
    open_ = decide(plan, history, last=False)
    assert open_.decision == "open" and open_.futility < open_.statistic < open_.bound
    assert next_repeats(open_, 20, 1, 1, MOST) == math.ceil(open_.planned_pairs / 5 / 20)
    last = decide(plan, history, last=True)
    assert last.decision == "rejected" and not last.stopped_early and last.futility == last.bound
    assert decide(plan, [Pairs(0, 0, 0)], last=True).decision == "rejected"


def item(case: str, repeat: int, baseline: str, verdict: str) -> GateItem:
    return GateItem.model_validate({"case": case, "repeat": repeat, "baseline": baseline, "verdict": verdict})


def test_the_gate_rule_test_reads_pairs_and_says_its_figures() -> None:
    """judge() with rule test: 20 cases agreeing but for one lost pair over three rounds pass early with
    the test's figures in `why`; the case whose candidate lost more pairs than it gained is named."""
    config = GateConfig(rule="test", max_repeats=10)
    items = [item(f"c{n}", k, "pass", "pass") for n in range(20) for k in (1, 2, 3)]
    items[0] = item("c0", 1, "pass", "fail")
    history = [Pairs(20, 1, 0, 20), Pairs(40, 1, 0, 40), Pairs(60, 1, 0, 60)]
    judged = judge(config, items, history, last=False)
    assert judged.verdict == "passed" and judged.test is not None and judged.test.stopped_early
    assert judged.broken == ["c0"] and "lower bound" in judged.why and "60 pairs" in judged.why
    assert "planned pairs" in judged.why


@pytest.mark.parametrize(("passed", "graded"), [(0, 20), (1, 29), (15, 148), (81, 263), (20, 20), (7, 9)])
def test_the_wilson_interval_equals_scipys(passed: int, graded: int) -> None:
    """service.kinds.evals.stats.wilson_bounds equals scipy's Wilson score interval (binomtest)."""
    scipy_ci = stats.binomtest(passed, graded).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_bounds(passed, graded) == pytest.approx((scipy_ci.low, scipy_ci.high), abs=1e-9)


@pytest.mark.parametrize(("gained", "lost"), [(7, 1), (6, 16), (3, 3), (0, 5), (12, 30), (1, 0)])
def test_the_exact_mcnemar_p_value_equals_scipys_binomial_test(gained: int, lost: int) -> None:
    """The exact McNemar p-value equals scipy's two-sided exact binomial test of the discordant pairs
    against 1/2."""
    scipy_p = stats.binomtest(gained, gained + lost, 0.5).pvalue
    assert mcnemar_exact(gained, lost) == pytest.approx(scipy_p, abs=1e-12)


@pytest.mark.parametrize(("both", "lost", "gained", "neither"), [(5, 5, 5, 5), (4, 4, 4, 5), (6, 5, 4, 5)])
def test_newcombes_paired_interval_is_built_from_scipys_wilson_intervals(
    both: int, lost: int, gained: int, neither: int
) -> None:
    """Where Newcombe's correlation term is 0, method 10's interval is the difference minus and plus the
    root of the squared distances to the two sides' Wilson limits; with scipy's Wilson limits it equals
    service.kinds.evals.stats.paired_difference."""
    n = both + lost + gained + neither
    before, after = both + lost, both + gained
    cross = both * neither - lost * gained
    assert 0 <= cross <= n / 2  # Newcombe's corrected phi is 0 for these counts
    b = stats.binomtest(before, n).proportion_ci(method="wilson")
    a = stats.binomtest(after, n).proportion_ci(method="wilson")
    diff = (after - before) / n
    low = diff - math.hypot(after / n - a.low, b.high - before / n)
    high = diff + math.hypot(a.high - after / n, before / n - b.low)
    found = paired_difference(both, lost, gained, neither)
    assert (found.low, found.high) == pytest.approx((low, high), abs=1e-9)


def test_the_simulation_catches_a_rule_that_does_not_spend_alpha(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the same null decisions judged with the fixed one-look bound 1.645 at
    every look (testing again after each round, alpha never spent) publish more than alpha + 3
    standard errors of the harmful candidates."""
    naive = stats.norm.isf(0.05)
    monkeypatch.setattr(sequential, "bounds", lambda fractions, alpha, last: (naive,) * len(fractions))
    published, _, _ = simulate(NOISY_BASE, NOISY_BASE - 0.1, seed=11, decisions=500)
    assert published > tolerance(ALPHA)


def test_the_lower_bound_agrees_with_the_decision_and_every_outcome_is_json() -> None:
    """Over many counts the reported lower bound is at or above -min_effect exactly when the test
    publishes, and every outcome (one pair, counts past max_pairs) survives a JSON round trip."""
    plan = Plan(ALPHA, BETA, MIN_EFFECT, 80)
    for pairs in (2, 20, 40, 60, 80):
        for lost in range(0, min(pairs, 6)):
            outcome = decide(plan, [Pairs(pairs, lost, 0, pairs)], last=True)
            assert (outcome.lower >= -0.1 - 1e-9) == (outcome.decision == "passed"), outcome
    for history in ([Pairs(1, 0, 0)], [Pairs(80, 0, 0, 80), Pairs(120, 0, 0, 120)]):
        outcome = decide(plan, history, last=False)
        assert type(outcome).model_validate_json(outcome.model_dump_json()) == outcome


def test_the_recursions_normal_density_equals_scipys() -> None:
    """The kernel of the bounds' recursion (the normal density in numpy, for speed) is scipy's normal
    density, over the range the grid spans and for a narrow and a wide step."""
    x = np.linspace(-12.0, 12.0, 2001)
    for sd in (0.05, 1.0, 3.5):
        expected = stats.norm.pdf(x / sd) / sd
        assert np.allclose(boundaries._normal_density(x, sd), expected, rtol=1e-12, atol=1e-300)
