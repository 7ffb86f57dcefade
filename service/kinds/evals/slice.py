"""The evaluation kind's registration (service.core.kinds); the acceptance gate is part of it: its items
are evaluation items, and its counters move with its events (gate.counters)."""

from __future__ import annotations

from service.core.kinds import FleetParts, KindSlice
from service.core.models.events import Event
from service.kinds.evals.counters import eval_rule
from service.kinds.evals.fleet import Evals
from service.kinds.evals.gate.counters import gate_rule


def _fleet(parts: FleetParts) -> Evals:
    return Evals(parts.redis, parts.store, parts.settings)


def _counters(event: Event) -> dict[str, int] | None:
    """An evaluation item's events move its evaluation's counters; a gate's events (the applying
    case's), the gate's."""
    found = eval_rule(event)
    return found if found is not None else gate_rule(event)


SLICE = KindSlice("evals", "service.kinds.evals", "workers.kinds.evals.kind", _fleet, counter_rule=_counters)
