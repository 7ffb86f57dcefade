"""The event contract: every kind of event the fleet emits (`EventKind`), its payload model
(service.core.models.event_data) and its event class (service.core.models.event_types), made one union
here: `Event`, discriminated by `kind`.

Every event is built and read through this union: the sink builds each with `event_of` (its data
checked against its kind's payload model before anything is written), and every reader of a line (the
metrics, the watch view, the API) parses it with `parse_event` into its kind's class, whose `data` is
its typed payload. A reader narrows an event with `isinstance(event, GatePassedEvent)`, or a payload
with `isinstance(event.data, EvalTagged)` for a tag that several kinds carry.

A kind is a member of `EventKind` or it is not an event: `service.core.events.EventSink` refuses any
other; the dashboard's JavaScript gets the kinds and their fields from `contract_fields`
(service/api/contract.py). docs/architecture.md, "Events", has a row for each.
"""

from __future__ import annotations

from typing import Annotated, Any, cast, get_args

from pydantic import Field, TypeAdapter, ValidationError

from service.core.errors import EventDataError
from service.core.models import event_types as t
from service.core.models.event_data import EvalTagged, EventData, JobTagged
from service.core.models.event_kinds import CASE_ENDS, LOGGED_AT_DEBUG, EventBase, EventKind
from service.core.validation import describe_validation

__all__ = [
    "CASE_ENDS",
    "EVENTS",
    "EVENT_CLASSES",
    "LOGGED_AT_DEBUG",
    "PAYLOADS",
    "EvalTagged",
    "Event",
    "EventBase",
    "EventData",
    "EventKind",
    "JobTagged",
    "contract_fields",
    "event_of",
    "parse_event",
]

Event = Annotated[
    t.JobStartedEvent
    | t.JobRequeuedEvent
    | t.JobEndedEvent
    | t.CaseQueuedEvent
    | t.CaseRequeuedEvent
    | t.CaseStartedEvent
    | t.LeaseLostEvent
    | t.ProviderDownEvent
    | t.CaseCompletedEvent
    | t.CaseDifficultEvent
    | t.CaseFailedEvent
    | t.CaseCancelledEvent
    | t.StepStartedEvent
    | t.StepFinishedEvent
    | t.RunWaitsForResumeEvent
    | t.RunWaitsForHoldEvent
    | t.RunWaitsForSandboxEvent
    | t.RunWaitsForApplyEvent
    | t.RunSandboxDownEvent
    | t.AttemptSetAsideEvent
    | t.AnalysisEditedSystemEvent
    | t.ApplyWaitsForLockEvent
    | t.ApplyRecoveredEvent
    | t.ApplyAbandonedEvent
    | t.MemorySubmittedEvent
    | t.SpendRecordedEvent
    | t.TuningHeldEvent
    | t.TuningReleasedEvent
    | t.BreakerOpenedEvent
    | t.BreakerProbedEvent
    | t.BreakerClosedEvent
    | t.StoreFullEvent
    | t.StoreRecoveredEvent
    | t.GoalStartedEvent
    | t.GoalResumedEvent
    | t.IterationStartedEvent
    | t.GoalRequeuedEvent
    | t.StepWaitsForResumeEvent
    | t.StepWaitsForHoldEvent
    | t.StepWaitsForSandboxEvent
    | t.StepSetAsideEvent
    | t.PlanInvalidEvent
    | t.ReviewInvalidEvent
    | t.ReviewCompleteTooEarlyEvent
    | t.GoalCompletedEvent
    | t.GoalIncompleteEvent
    | t.GoalFailedEvent
    | t.GoalCancelledEvent
    | t.EvalCreatedEvent
    | t.EvalItemStartedEvent
    | t.EvalItemSetAsideEvent
    | t.EvalItemRequeuedEvent
    | t.EvalItemEndedEvent
    | t.GateStartedEvent
    | t.GatePassedEvent
    | t.GateRejectedEvent
    | t.CandidateRebasedEvent
    | t.GateAbandonedEvent
    | t.CandidateAwaitsApprovalEvent
    | t.CandidateDecidedEvent,
    Field(discriminator="kind"),
]
"""An event of any kind, as its kind's class (service.core.models.event_types)."""

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)
"""Builds and parses events (`event_of`, `parse_event`)."""

EVENT_CLASSES: tuple[type[EventBase], ...] = get_args(get_args(Event)[0])
"""Each kind's event class, in the order of `EventKind`."""

PAYLOADS: dict[EventKind, type[EventData]] = {
    get_args(cls.model_fields["kind"].annotation)[0]: cast(
        type[EventData], cls.model_fields["data"].annotation
    )
    for cls in EVENT_CLASSES
}
"""Each kind's payload model (its event class's `data`)."""


def event_of(fields: dict[str, Any]) -> Event:
    """An event of `fields["kind"]`, built from its fields; EventDataError naming the kind and the field
    when its data (or a field of its envelope) is not what its kind's model says."""
    try:
        return EVENTS.validate_python(fields)
    except ValidationError as exc:
        kind = EventKind(fields["kind"]).value
        problems = describe_validation(exc).replace(f"field '{kind}.", "field '")
        raise EventDataError(f"event {kind}: {problems}") from None


def parse_event(line: str | bytes) -> Event:
    """An event line (the stream's, events.jsonl's) as its kind's class; ValidationError if it is none."""
    return EVENTS.validate_json(line)


def contract_fields() -> dict[str, dict[str, Any]]:
    """Each kind's payload as the dashboard reads it: its JSON schema (`properties`, `required`)."""
    return {
        kind.value: PAYLOADS[kind].model_json_schema(by_alias=True, mode="serialization")
        for kind in EventKind
    }
