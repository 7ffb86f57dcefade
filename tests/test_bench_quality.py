"""`bench quality` end to end on one seed: its fleet arms on a real Redis and real worker processes, GEPA
(the `gepa` package, which must be installed: the bench's optional dependencies) at their budgets, and
the figures and table it prints."""

from __future__ import annotations

import math

import pytest

from bench import quality
from bench.common import ROOT
from bench.quality_gepa import run_gepa
from bench.quality_world import World


def test_bench_quality_scores_every_arm_against_the_truth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One seed of every arm, on ten of the training cases, runs to its end; each final version is
    scored by the ground truth, and the bench reports the GEPA comparison and the test rule's figures."""
    monkeypatch.setenv(quality.SEEDS_ENV, "1")
    monkeypatch.setenv(quality.CASES_ENV, "10")
    figures = quality.run()
    names = [f.name for f in figures]
    assert names[0].startswith("true held-out pass rate, best arm")
    assert "rule test: good edits rejected, of those it judged" in names
    assert "rule test: harmful edits published, of those it judged" in names
    best = figures[0]
    assert (
        best.value is not None
        and 0 < best.value <= 100
        and best.baseline is not None
        and best.met is not None
    )
    for figure in figures:  # a share with nothing to share is None (`-`), never NaN
        assert figure.value is None or not math.isnan(figure.value), figure
    table = (ROOT / "var" / "bench" / "quality.md").read_text()
    for label in [*quality.LABELS.values(), "(d) GEPA at c's budget"]:
        assert label in table


def test_gepa_arm_spends_its_budget_on_the_demo_world() -> None:
    """GEPA, given a budget of metric calls, spends at least that many graded runs, proposes edits with
    the demo applier's rule, and its final version is scored exactly."""
    world = World.load()
    outcome = run_gepa(world, seed=3, budget=60)
    assert outcome.graded_runs >= 60
    assert sum(outcome.edits.values()) >= 1
    assert world.imported <= outcome.final_rules
    assert outcome.heldout_rate == world.heldout_rate(outcome.final_rules)


def test_edits_are_classified_by_the_truth() -> None:
    """An over-fitting rule is harmful, the bait is bait, and a rule a case needs is good."""
    world = World.load()
    base = set(world.imported)
    assert world.classify(base, base | {"overfit-01-a"}) == "harmful"
    assert world.classify(base, base | {"bait-01-a"}) == "bait"
    assert world.classify(base, base | {"needs-05-a"}) == "good"
