"""The guards' verdict on a candidate, from its base's and its own text (docs/guards.md). Pure: the worker
reads the texts and the cases (workers.kinds.evals.gate.guard) and records what this says.

    leak      a run of `leak_min_words` words the edit added that a case's input or rubric holds
              (held-out cases always, training cases unless `leak_training` is off)
    size      the candidate over `system_max_tokens` (and larger than its base), or the edit adding
              more than `edit_max_growth_tokens`
    collapse  the edit removing more than `edit_max_removed` of the base's tokens (net)
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.models.guards import GuardsConfig
from service.kinds.evals.guards.leak import LeakIndex, runs
from service.kinds.evals.guards.models import GuardName
from service.kinds.evals.history.tokens import count_tokens


@dataclass(frozen=True)
class GuardVerdict:
    """A guard's rejection: which, why (one line), and its evidence."""

    guard: GuardName
    why: str
    case: str | None = None
    words: str | None = None


@dataclass(frozen=True)
class Sizes:
    before: int
    after: int


def sizes(base: list[str], candidate: list[str]) -> Sizes:
    return Sizes(sum(map(count_tokens, base)), sum(map(count_tokens, candidate)))


def check(
    config: GuardsConfig, base: list[str], candidate: list[str], index: LeakIndex | None
) -> tuple[GuardVerdict | None, Sizes]:
    """The first guard that rejects the candidate (leak, then size, then collapse), or None."""
    size = sizes(base, candidate)
    if config.leak_min_words is not None and index is not None:
        n = config.leak_min_words
        before: set[tuple[str, ...]] = set().union(*(runs(text, n) for text in base))
        added = set().union(*(runs(text, n) for text in candidate)) - before
        leak = index.find(added)
        if leak is not None:
            which = "held-out" if leak.held_out else "training"
            why = f"leak: the edit copies {n} words of {which} case {leak.case}: {leak.words!r}"
            return GuardVerdict("leak", why, leak.case, leak.words), size
    growth = size.after - size.before
    if config.system_max_tokens is not None and size.after > config.system_max_tokens and growth > 0:
        why = f"size: {size.after} tokens, more than system_max_tokens {config.system_max_tokens}"
        return GuardVerdict("size", why), size
    if config.edit_max_growth_tokens is not None and growth > config.edit_max_growth_tokens:
        why = f"size: the edit adds {growth} tokens ({size.before} -> {size.after}), more than "
        why += f"edit_max_growth_tokens {config.edit_max_growth_tokens}"
        return GuardVerdict("size", why), size
    removed_max = config.edit_max_removed
    if removed_max is not None and size.before and -growth > removed_max * size.before:
        share = -growth / size.before
        why = f"collapse: the edit removes {share:.0%} of the instructions ({size.before} -> {size.after} "
        why += f"tokens), more than edit_max_removed {config.edit_max_removed:g}"
        return GuardVerdict("collapse", why), size
    return None, size
