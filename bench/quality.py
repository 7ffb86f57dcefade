"""Quality: tunefleet's loop and gates against GEPA on the noisy demo world (examples/noisy), whose truth
is known, each scored against that truth (issue 49).

Arms, each on the same seeds (`BENCH_QUALITY_SEEDS`, default 80; a seed is a world of chance):
- (a) the seed's loop, no gate; (b) `gate: {rule: strict}`; (c) `gate: {rule: test}`: on the real
  fleet (bench.quality_fleet), every (arm, seed) one tuning, all at once;
- (d) GEPA (bench.quality_gepa) on the same world, edit-maker and grader, given for each seed
  `max_metric_calls` equal to the graded runs that a tunefleet arm spent on that seed: the same budget,
  paired by seed (GEPA is run once per tunefleet arm and seed).

Per arm: the true expected held-out pass rate of the final version (exact, from the ground truth), the
share of good edits rejected, of harmful and of bait edits published (bench.quality_world says which
is which), graded runs spent, and runs per judged gate decision; means over seeds with Student t 95 %
intervals, shares of edits pooled over seeds with Wilson 95 % intervals. The figures: the best
tunefleet arm against GEPA at its budget (the per-seed paired difference, its 95 % lower bound at or
above -1 point), and the test rule's error rates and cost beside the strict rule's. The whole table is
printed and written to var/bench/quality.md.
"""

from __future__ import annotations

import math
import os
import statistics
import sys

from bench.common import ROOT, Figure
from bench.quality_fleet import run_arms
from bench.quality_gepa import run_gepa
from bench.quality_table import Arm, over, per_gate, share, table
from bench.quality_world import EXAMPLE, EditKind, Interval, World, mean_interval

NAME = "quality"
SEEDS_ENV = "BENCH_QUALITY_SEEDS"
CASES_ENV = "BENCH_QUALITY_CASES"
DEFAULT_SEEDS = 80
"""Planned from the four 20-seed runs of 7 and 8 December: the per-seed difference (c) - GEPA had a
standard deviation of about 7.6 points around a mean of about +1.4, so showing a lower bound at or above
-1 point with 80 % power takes ((1.96 + 0.84) x 7.6 / (1.4 + 1))^2 = 79 seeds. With 20 it could not."""
WORKERS = 2
SLOTS = 16
TIMEOUT_S = 1800.0
FLEET_ARMS = ["a", "b", "c"]
LABELS = {"a": "(a) no gate (the seed's loop)", "b": "(b) gate rule strict", "c": "(c) gate rule test"}
MAX_GOOD_REJECTED = 0.10
MAX_HARMFUL_PUBLISHED = 0.05
MAX_GAP = -0.01


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}: {raw!r} is not a count (expected a whole number >= 1)")
    return int(raw)


def seeds() -> list[int]:
    return list(range(1, _count(SEEDS_ENV, DEFAULT_SEEDS) + 1))


def chosen_world() -> World:
    """The noisy example's world, with fewer training cases when `BENCH_QUALITY_CASES` asks."""
    full = World.load()
    return full.smaller(_count(CASES_ENV, len(full.train)))


def gap(arm: Arm, baseline: Arm) -> Interval:
    """The per-seed paired difference of true held-out pass rates (arm - baseline)."""
    return mean_interval([arm[s].heldout_rate - baseline[s].heldout_rate for s in arm])


def run() -> list[Figure]:
    world = chosen_world()
    chosen = seeds()
    outcomes, took_s = run_arms(world, FLEET_ARMS, chosen, EXAMPLE, WORKERS, SLOTS, TIMEOUT_S)
    arms = {arm: {s: outcomes[(arm, s)] for s in chosen} for arm in FLEET_ARMS}
    gepa = {arm: {s: run_gepa(world, s, arms[arm][s].graded_runs) for s in chosen} for arm in FLEET_ARMS}
    text = table(world, arms, gepa, LABELS)
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.md").write_text(text + "\n")
    print(text, file=sys.stderr)
    best = max(FLEET_ARMS, key=lambda a: statistics.fmean(o.heldout_rate for o in arms[a].values()))
    diff = gap(arms[best], gepa[best])
    setup = (
        f"{len(chosen)} seeds, {len(chosen) * len(FLEET_ARMS)} tunings on {WORKERS} workers in {took_s:.0f} s"
    )
    rate, gepa_rate = (
        statistics.fmean(o.heldout_rate for o in arm.values()) for arm in (arms[best], gepa[best])
    )
    figures = [
        Figure(
            NAME,
            f"true held-out pass rate, best arm ({best})",
            100 * rate,
            "%",
            100 * gepa_rate,
            "GEPA at the same budget, paired by seed",
            "difference >= -1 point (95 % lower bound)",
            bool(diff.low >= MAX_GAP),
            f"difference {100 * diff.mean:+.1f} points, 95 % interval [{100 * diff.low:+.1f}, "
            f"{100 * diff.high:+.1f}]; {LABELS[best]} {over(arms[best], lambda o: o.heldout_rate).text()}; "
            f"imported version {world.heldout_rate(world.imported):.3f}; {setup}",
        ),
    ]
    figures += test_rule_figures(arms)
    return figures


def _percent(value: float) -> float | None:
    """A share as a figure's percent; None (printed `-`) when there was nothing to share."""
    return None if math.isnan(value) else 100 * value


def _error_figure(name: str, test: Arm, strict: Arm, kind: EditKind, published: bool, limit: float) -> Figure:
    """One error rate of the test rule, over the edits it judged, beside the strict rule's."""
    (rate, count), (strict_rate, strict_count) = (
        share(arm, kind, published, judged_only=True) for arm in (test, strict)
    )
    return Figure(
        NAME,
        name,
        _percent(rate.mean),
        "%",
        _percent(strict_rate.mean),
        "rule strict",
        f"<= {100 * limit:.0f} %",
        None if math.isnan(rate.mean) else bool(rate.mean <= limit),
        f"95 % interval {rate.text(100, 0)} of {count} {kind} edits it judged; strict "
        f"{strict_rate.text(100, 0)} of {strict_count}",
    )


def test_rule_figures(arms: dict[str, Arm]) -> list[Figure]:
    """The test rule's error rates and runs per decision beside the strict rule's."""
    test, strict = arms["c"], arms["b"]
    runs, strict_runs = per_gate(test), per_gate(strict)
    return [
        _error_figure(
            "rule test: good edits rejected, of those it judged",
            test,
            strict,
            "good",
            False,
            MAX_GOOD_REJECTED,
        ),
        _error_figure(
            "rule test: harmful edits published, of those it judged",
            test,
            strict,
            "harmful",
            True,
            MAX_HARMFUL_PUBLISHED,
        ),
        Figure(
            NAME,
            "rule test: graded runs per gate decision",
            None if math.isnan(runs) else runs,
            "runs",
            None if math.isnan(strict_runs) else strict_runs,
            "rule strict",
            note="gate items (candidate and base) over judged gate decisions",
        ),
    ]
