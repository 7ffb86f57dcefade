"""The echo kind's registration: its line in the `kinds` setting is `tests.kinds.echo.service`."""

from __future__ import annotations

from service.core.kinds import FleetParts, KindSlice
from tests.kinds.echo.service.counters import echo_rule
from tests.kinds.echo.service.fleet import EchoFleet
from tests.kinds.echo.service.models import KIND_NAME


def _fleet(parts: FleetParts) -> EchoFleet:
    return EchoFleet(parts)


SLICE = KindSlice(
    KIND_NAME, "tests.kinds.echo.service", "tests.kinds.echo.workers.kind", _fleet, counter_rule=echo_rule
)
