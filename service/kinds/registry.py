"""The built-in kinds, listed once; the kinds a fleet runs are these and those its `kinds` setting
names (service.core.kinds.load_slices)."""

from __future__ import annotations

from service.core.events import CounterRule
from service.core.kinds import KindSlice, load_slices
from service.core.settings import FleetSettings

BUILT_IN = ("service.kinds.cases", "service.kinds.goals", "service.kinds.evals")


def slices(settings: FleetSettings) -> tuple[KindSlice, ...]:
    """Every kind the fleet runs: the built-in ones, then the settings' own."""
    return load_slices((*BUILT_IN, *settings.kinds))


def counter_rules(settings: FleetSettings) -> tuple[CounterRule, ...]:
    """Every kind's counters rule (service.core.events.counter_moves)."""
    return tuple(kind.counter_rule for kind in slices(settings) if kind.counter_rule is not None)
