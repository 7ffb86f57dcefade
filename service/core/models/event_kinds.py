"""The event contract's kinds and envelope: every kind of event the fleet emits (`EventKind`), and the
fields every event has whatever its kind (`EventBase`). Each kind's own event class, with its payload
model as `data`, is in service.core.models.event_types; service.core.models.events makes them one union.

A kind is a member of `EventKind` or it is not an event: `service.core.events.EventSink` refuses any
other, the metrics, the watch view and the dashboard's JavaScript (`service/api/contract.py` exports the
kinds to it) name kinds only through the enum. docs/architecture.md, "Events", has a row for each.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from service.core.models.case import State
from service.core.models.event_data import EventData, NoData
from service.core.models.records import Phase


class EventKind(StrEnum):
    """Every kind of event; its value is the snake_case name on the wire."""

    # a job's life, for a kind that brings no event kinds of its own (its name in `data.kind`;
    # docs/architecture.md, "Adding a kind")
    JOB_STARTED = "job_started"
    JOB_REQUEUED = "job_requeued"
    JOB_ENDED = "job_ended"
    # a case's life
    CASE_QUEUED = "case_queued"
    CASE_REQUEUED = "case_requeued"
    CASE_STARTED = "case_started"
    LEASE_LOST = "lease_lost"
    PROVIDER_DOWN = "provider_down"
    CASE_COMPLETED = "case_completed"
    CASE_DIFFICULT = "case_difficult"
    CASE_FAILED = "case_failed"
    CASE_CANCELLED = "case_cancelled"
    # a case's steps
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    RUN_WAITS_FOR_RESUME = "run_waits_for_resume"
    RUN_WAITS_FOR_HOLD = "run_waits_for_hold"
    RUN_WAITS_FOR_SANDBOX = "run_waits_for_sandbox"
    RUN_WAITS_FOR_APPLY = "run_waits_for_apply"
    RUN_SANDBOX_DOWN = "run_sandbox_down"
    ATTEMPT_SET_ASIDE = "attempt_set_aside"
    ANALYSIS_EDITED_SYSTEM = "analysis_edited_system"
    APPLY_WAITS_FOR_LOCK = "apply_waits_for_lock"
    APPLY_RECOVERED = "apply_recovered"
    APPLY_ABANDONED = "apply_abandoned"
    MEMORY_SUBMITTED = "memory_submitted"
    SPEND_RECORDED = "spend_recorded"
    # a tuning and the fleet
    TUNING_HELD = "tuning_held"
    TUNING_RELEASED = "tuning_released"
    BREAKER_OPENED = "breaker_opened"
    BREAKER_PROBED = "breaker_probed"
    BREAKER_CLOSED = "breaker_closed"
    STORE_FULL = "store_full"
    STORE_RECOVERED = "store_recovered"
    # a goal's life (its steps start and finish with STEP_STARTED and STEP_FINISHED)
    GOAL_STARTED = "goal_started"
    GOAL_RESUMED = "goal_resumed"
    ITERATION_STARTED = "iteration_started"
    GOAL_REQUEUED = "goal_requeued"
    STEP_WAITS_FOR_RESUME = "step_waits_for_resume"
    STEP_WAITS_FOR_HOLD = "step_waits_for_hold"
    STEP_WAITS_FOR_SANDBOX = "step_waits_for_sandbox"
    STEP_SET_ASIDE = "step_set_aside"
    PLAN_INVALID = "plan_invalid"
    REVIEW_INVALID = "review_invalid"
    REVIEW_COMPLETE_TOO_EARLY = "review_complete_too_early"
    GOAL_COMPLETED = "goal_completed"
    GOAL_INCOMPLETE = "goal_incomplete"
    GOAL_FAILED = "goal_failed"
    GOAL_CANCELLED = "goal_cancelled"
    # an evaluation's life (its items' steps are a case's steps, with `data.eval`:
    # service.kinds.evals.counters)
    EVAL_CREATED = "eval_created"
    EVAL_ITEM_STARTED = "eval_item_started"
    EVAL_ITEM_SET_ASIDE = "eval_item_set_aside"
    EVAL_ITEM_REQUEUED = "eval_item_requeued"
    EVAL_ITEM_ENDED = "eval_item_ended"
    # an apply's acceptance gate (service.kinds.evals.gate: counters in service.kinds.evals.gate.counters)
    GATE_STARTED = "gate_started"
    GATE_PASSED = "gate_passed"
    GATE_REJECTED = "gate_rejected"
    CANDIDATE_REBASED = "candidate_rebased"
    GATE_ABANDONED = "gate_abandoned"
    # a candidate that waits for a person (`gate.approval: manual`, service.kinds.evals.approval)
    CANDIDATE_AWAITS_APPROVAL = "candidate_awaits_approval"
    CANDIDATE_DECIDED = "candidate_decided"


LOGGED_AT_DEBUG: frozenset[EventKind] = frozenset({EventKind.STEP_STARTED, EventKind.STEP_FINISHED})
"""The kinds every step of every job sends: a process logs them at debug, the others at info. A worker's
info log keeps each job's start, end and every wait, hold or fault, not two lines per step (at a hundred
steps a second, most of its log volume and a few percent of its CPU); the events themselves are in
the events file, the stream and `tunefleet watch` whatever the level."""

CASE_ENDS: dict[State, EventKind] = {
    "completed": EventKind.CASE_COMPLETED,
    "difficult": EventKind.CASE_DIFFICULT,
    "failed": EventKind.CASE_FAILED,
    "cancelled": EventKind.CASE_CANCELLED,
}
"""The kind that ends a case in each final state."""


class EventBase(BaseModel):
    """One thing that happened in a tuning or a goal: the fields every kind has (its `kind` and `data`
    are its class's, service.core.models.event_types). A finished step has one shape whatever the job:
    its `step` and `duration_ms` (and for a goal, its `iteration`) at the top level."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    kind: EventKind
    tuning: str
    case: str | None = None
    goal: str | None = Field(default=None, description="The goal of a goal's event (its tuning may be '').")
    rev: int | None = None
    iteration: int | None = Field(default=None, description="A goal's iteration (its events only).")
    phase: Phase | None = None
    attempt: int | None = None
    step: str | None = Field(
        default=None, description="The step's name in its kind (a case's StepName, a goal's GoalStep)."
    )
    worker: str | None = None
    detail: str | None = None
    duration_ms: int | None = None
    tokens: int | None = None
    unmeasured_tokens: int | None = Field(
        default=None, description="Of `tokens`, those only the agent counted (usage source 'agent')."
    )
    estimated_tokens: int | None = Field(
        default=None, description="Of `tokens`, those the fleet's LLM adapter estimated (no usage given)."
    )
    cost_usd: float | None = None
    data: EventData = Field(default_factory=NoData)

    @field_serializer("data")
    def _data_as_given(self, data: EventData) -> dict[str, Any]:
        """The data as it was given (the API's answers); an events line is `line`'s."""
        return data.wire()

    def line(self) -> str:
        """The event as one line of events.jsonl and one entry of the stream: the fields not at their
        default, and the data's keys as they were given (none: no `data`), as when `data` was a dict.
        Made of two dumps by pydantic's core, without a serializer of ours in Python: the sink makes one
        per event."""
        head = self.model_dump_json(exclude_defaults=True, exclude={"data"})
        if not self.data.model_fields_set:
            return head
        return f'{head[:-1]},"data":{self.data.model_dump_json(by_alias=True, exclude_unset=True)}}}'

    @model_validator(mode="after")
    def _a_finished_step_has_one_shape(self) -> Self:
        if self.kind is EventKind.STEP_FINISHED and (self.step is None or self.duration_ms is None):
            raise ValueError("a step_finished event names its step and its duration_ms (top level)")
        return self
