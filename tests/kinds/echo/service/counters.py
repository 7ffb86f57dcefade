"""The counters an echo job's events move in its tuning's counters hash: `echo_started` at each start
and `echo_<state>` at its end."""

from __future__ import annotations

from service.core.models.event_types import JobEndedEvent, JobStartedEvent
from service.core.models.events import Event, JobTagged
from tests.kinds.echo.service.models import KIND_NAME


def echo_rule(event: Event) -> dict[str, int] | None:
    """The moves of an echo job's `job_started` and `job_ended` events; None for any other event."""
    if not isinstance(event.data, JobTagged) or event.data.kind != KIND_NAME:
        return None
    if isinstance(event, JobStartedEvent):
        return {"echo_started": 1}
    if isinstance(event, JobEndedEvent):
        return {f"echo_{event.data.state}": 1}
    return {}
