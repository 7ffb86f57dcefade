"""What the agent call under way has spent so far, as the fleet's own adapters measure it.

A step opens a meter around its agent call (`JobRun.metered`); the fleet's in-process adapters (the
llm session, the demo agents) follow it with a live reading of their spend. When the call returns, the
step records what the call reported and the meter is dropped; when it never returns (the step ran into
its deadline, the job was cancelled, the worker is stopping), the run context records the meter's
reading instead, so that what was paid for is counted on every way out. An agent process's own word
never reaches a meter: only code of the fleet's follows one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from service.core.models.records import Usage

CURRENT: ContextVar[StepMeter | None] = ContextVar("tunefleet_step_meter", default=None)
"""The meter of the agent call the current task is making (None outside a metered call)."""


class StepMeter:
    """The live readings of one agent call's spend."""

    def __init__(self) -> None:
        self._readings: list[Callable[[], Usage]] = []

    def follow(self, reading: Callable[[], Usage]) -> None:
        self._readings.append(reading)

    def usage(self) -> Usage:
        total = Usage(source="api")
        for reading in self._readings:
            total = total + reading()
        return total


def follow_spend(reading: Callable[[], Usage]) -> None:
    """Have the current agent call's meter (if it is metered) read `reading` when the call is cut short."""
    meter = CURRENT.get()
    if meter is not None:
        meter.follow(reading)
