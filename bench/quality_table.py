"""The table of `bench quality`: per arm, means over seeds with Student t 95 % intervals, and shares of
edits pooled over seeds with Wilson 95 % intervals (bench.quality_world)."""

from __future__ import annotations

import math
from collections.abc import Callable

from bench.quality_world import EditKind, Interval, Outcome, World, mean_interval, share_interval

Arm = dict[int, Outcome]


def over(arm: Arm, value: Callable[[Outcome], float]) -> Interval:
    return mean_interval([value(o) for o in arm.values()])


def share(arm: Arm, kind: EditKind, published: bool, judged_only: bool = False) -> tuple[Interval, int]:
    """The share of an arm's edits of one kind that were published (or rejected), and of how many: of
    every edit, or of those a gate's rule judged."""
    edits = sum((o.judged if judged_only else o.edits)[kind] for o in arm.values())
    kept = sum((o.judged_kept if judged_only else o.kept)[kind] for o in arm.values())
    return share_interval(kept if published else edits - kept, edits), edits


def per_gate(arm: Arm) -> float:
    """Graded gate runs (candidate and base) per judged gate decision; NaN with none."""
    gates = sum(o.gates for o in arm.values())
    return sum(o.gate_runs for o in arm.values()) / gates if gates else math.nan


def _edits(arm: Arm, kind: EditKind, published: bool, gated: bool) -> str:
    every, count = share(arm, kind, published)
    cell = f"{every.text(100, 0)} of {count}"
    if gated:
        judged, judged_count = share(arm, kind, published, judged_only=True)
        cell += f"; judged: {judged.text(100, 0)} of {judged_count}"
    return cell


def row(label: str, arm: Arm, gated: bool) -> str:
    runs = per_gate(arm)
    cells = [
        label,
        over(arm, lambda o: o.heldout_rate).text(),
        _edits(arm, "good", False, gated),
        _edits(arm, "harmful", True, gated),
        _edits(arm, "bait", True, gated),
        over(arm, lambda o: o.graded_runs).text(digits=0),
        "-" if math.isnan(runs) else f"{runs:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| arm | true held-out pass rate | good edits rejected (%) | harmful edits published (%) | "
    "bait edits published (%) | graded runs | runs per judged gate decision |\n"
    "|---|---|---|---|---|---|---|"
)


def table(world: World, arms: dict[str, Arm], gepa: dict[str, Arm], labels: dict[str, str]) -> str:
    """The markdown table: the tunefleet arms, then GEPA at each one's budget."""
    lines = [HEADER]
    lines += [row(labels[arm], outcomes, gated=arm != "a") for arm, outcomes in arms.items()]
    lines += [row(f"(d) GEPA at {arm}'s budget", outcomes, gated=False) for arm, outcomes in gepa.items()]
    seeds = len(next(iter(arms.values())))
    imported = world.heldout_rate(world.imported)
    return "\n".join(lines) + (
        f"\n\n{seeds} seeds; the true held-out pass rate of the imported version is {imported:.3f}; "
        "`judged`: the edits a gate's rule decided (a gate with no passed case to gate on publishes "
        "unjudged)."
    )
