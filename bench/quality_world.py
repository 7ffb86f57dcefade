"""The world of `bench quality`: examples/noisy's cases, its imported rules, and the ground truth that
scores an optimizer's final version and each edit it made (service.kinds.cases.truth), plus the 95 %
intervals the bench reports.

An edit turns prose holding the rules `before` into prose holding `after`. Against the truth it is:
- `harmful` when it lowers the expected pass rate of the training cases (those a gate can see);
- `bait` when it does not lower theirs but lowers the held-out cases' (no gate can see it);
- `good` otherwise: it helps, or does no harm to either.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from scipy import stats

from bench.common import ROOT
from service.kinds.cases.truth import (
    RULE_PREFIX,
    WorldKnobs,
    edit_effect,
    pass_rate,
    prose_rules,
    world_knobs,
)

EXAMPLE = ROOT / "examples" / "noisy"
JUDGE_FLIP = 0.1
EPSILON = 1e-9
"""An effect within this of 0 is no effect (a sum of float products that cancel)."""

EditKind = Literal["good", "harmful", "bait"]


def load_cases(folder: Path) -> list[dict[str, Any]]:
    """The case files of a folder, as dicts, by id."""
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


@dataclass(frozen=True)
class World:
    """The noisy example: its training cases (as files and as knobs), its held-out knobs, and the rules
    its imported prose holds."""

    train: list[dict[str, Any]]
    train_knobs: dict[str, WorldKnobs]
    heldout_knobs: dict[str, WorldKnobs]
    imported: frozenset[str]
    judge_flip: float = JUDGE_FLIP

    @classmethod
    def load(cls, example: Path = EXAMPLE) -> World:
        train = load_cases(example / "cases")
        heldout = load_cases(example / "heldout")
        return cls(
            train=train,
            train_knobs={c["id"]: world_knobs(c.get("demo", {}), f"case {c['id']}") for c in train},
            heldout_knobs={c["id"]: world_knobs(c.get("demo", {}), f"case {c['id']}") for c in heldout},
            imported=frozenset(prose_rules(example / "system")),
        )

    def smaller(self, count: int) -> World:
        """The same world with `count` training cases, one of each kind first (`flaky-01`, `needs-01`...,
        then the `-02`s...): a quick run's world."""
        chosen = sorted(self.train, key=lambda c: (str(c["id"]).rsplit("-", 1)[-1], str(c["id"])))[:count]
        ids = {str(c["id"]) for c in chosen}
        return replace(
            self,
            train=[c for c in self.train if c["id"] in ids],
            train_knobs={k: v for k, v in self.train_knobs.items() if k in ids},
        )

    def heldout_rate(self, held: Set[str]) -> float:
        """The true expected held-out pass rate of prose holding `held`."""
        return pass_rate(self.heldout_knobs.values(), held, self.judge_flip)

    def classify(self, before: Set[str], after: Set[str]) -> EditKind:
        """What an edit from `before` to `after` truly is (see the module's docstring)."""
        if edit_effect(self.train_knobs.values(), before, after, self.judge_flip) < -EPSILON:
            return "harmful"
        if edit_effect(self.heldout_knobs.values(), before, after, self.judge_flip) < -EPSILON:
            return "bait"
        return "good"


def version_rules(repo: Path, version: str) -> frozenset[str]:
    """The rules a version of a system repository holds (its `- rule: <slug>` lines), read with git."""
    found = subprocess.run(
        ["git", f"--git-dir={repo}", "grep", "-h", "-I", "-e", RULE_PREFIX.strip(), version],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode not in (0, 1):
        raise RuntimeError(f"git grep in {repo} at {version}: {found.stderr.strip()}")
    lines = (line.strip() for line in found.stdout.splitlines())
    return frozenset(line.removeprefix(RULE_PREFIX) for line in lines if line.startswith(RULE_PREFIX))


@dataclass
class Outcome:
    """One optimizer's tuning on one seed, scored against the truth."""

    final_rules: frozenset[str]
    heldout_rate: float
    graded_runs: int
    edits: dict[EditKind, int] = field(default_factory=lambda: {"good": 0, "harmful": 0, "bait": 0})
    kept: dict[EditKind, int] = field(default_factory=lambda: {"good": 0, "harmful": 0, "bait": 0})
    judged: dict[EditKind, int] = field(default_factory=lambda: {"good": 0, "harmful": 0, "bait": 0})
    judged_kept: dict[EditKind, int] = field(default_factory=lambda: {"good": 0, "harmful": 0, "bait": 0})
    gates: int = 0
    gate_runs: int = 0

    def count(self, kind: EditKind, published: bool, judged: bool) -> None:
        """One edit: whether it was published, and whether a gate's rule judged it (a gate with no case
        to gate on publishes unjudged; with no gate, nothing is judged)."""
        self.edits[kind] += 1
        self.kept[kind] += published
        self.judged[kind] += judged
        self.judged_kept[kind] += judged and published


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % interval."""

    mean: float
    low: float
    high: float

    def text(self, scale: float = 1.0, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "-"
        m, lo, hi = (round(v * scale, digits) for v in (self.mean, self.low, self.high))
        return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def mean_interval(values: list[float]) -> Interval:
    """The mean of per-seed values with its Student t 95 % interval (seeds are independent)."""
    if not values:
        return Interval(math.nan, math.nan, math.nan)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, mean, mean)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half)


def share_interval(hits: int, total: int) -> Interval:
    """A share of edits (pooled over seeds) with its Wilson 95 % interval."""
    if total == 0:
        return Interval(math.nan, math.nan, math.nan)
    ci = stats.binomtest(hits, total).proportion_ci(confidence_level=0.95, method="wilson")
    return Interval(hits / total, ci.low, ci.high)
