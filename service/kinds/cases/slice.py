"""The case kind's registration (service.core.kinds)."""

from __future__ import annotations

from service.core.kinds import KindSlice
from service.kinds.cases.counters import case_counter_moves
from service.kinds.cases.fleet import CaseFleet

SLICE = KindSlice(
    "cases", "service.kinds.cases", "workers.kinds.cases.kind", CaseFleet, counter_rule=case_counter_moves
)
