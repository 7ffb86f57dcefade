"""The events of an apply's candidate (its gate, a person's approval, its re-base): each is an event of the
apply step of the try that made the candidate."""

from __future__ import annotations

from typing import Any

from service.core.models.events import EventKind
from service.core.models.records import Phase
from workers.kinds.cases.run import CaseRun


async def candidate_event(
    case_run: CaseRun, kind: EventKind, phase: Phase, attempt: int, detail: str, data: dict[str, Any]
) -> None:
    """Send the event `kind` of the apply step of try (`phase`, `attempt`)."""
    await case_run.emit(kind, step="apply", phase=phase, attempt=attempt, detail=detail, data=data)
