"""The goal kind's registration (service.core.kinds)."""

from __future__ import annotations

from service.core.kinds import FleetParts, KindSlice
from service.kinds.goals.fleet import Goals


def _fleet(parts: FleetParts) -> Goals:
    return Goals(parts.redis, parts.store, parts.settings)


SLICE = KindSlice("goals", "service.kinds.goals", "workers.kinds.goals.kind", _fleet)
