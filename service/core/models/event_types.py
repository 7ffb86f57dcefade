"""One event class per kind: its `kind` a literal of `EventKind`, its `data` its kind's payload model
(service.core.models.event_data). service.core.models.events makes them one union discriminated by
`kind`, so that an event read back (the stream, events.jsonl, GET /api/events) is its kind's class,
and a reader narrows it with `isinstance` to read its payload's fields typed.

A kind whose payload has a required field has no default `data`: an event of it without one is refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from service.core.models import event_data as d
from service.core.models.event_kinds import EventBase, EventKind

K = EventKind


class JobStartedEvent(EventBase):
    kind: Literal[K.JOB_STARTED]
    data: d.JobStarted


class JobRequeuedEvent(EventBase):
    kind: Literal[K.JOB_REQUEUED]
    data: d.JobRequeued


class JobEndedEvent(EventBase):
    kind: Literal[K.JOB_ENDED]
    data: d.JobEnded


class CaseQueuedEvent(EventBase):
    kind: Literal[K.CASE_QUEUED]
    data: d.NoData = Field(default_factory=d.NoData)


class CaseRequeuedEvent(EventBase):
    kind: Literal[K.CASE_REQUEUED]
    data: d.Requeued = Field(default_factory=d.Requeued)


class CaseStartedEvent(EventBase):
    kind: Literal[K.CASE_STARTED]
    data: d.LeaseStart


class LeaseLostEvent(EventBase):
    kind: Literal[K.LEASE_LOST]
    data: d.LeaseLost = Field(default_factory=d.LeaseLost)


class ProviderDownEvent(EventBase):
    kind: Literal[K.PROVIDER_DOWN]
    data: d.ProviderDown


class CaseCompletedEvent(EventBase):
    kind: Literal[K.CASE_COMPLETED]
    data: d.CaseEnded = Field(default_factory=d.CaseEnded)


class CaseDifficultEvent(EventBase):
    kind: Literal[K.CASE_DIFFICULT]
    data: d.CaseEnded = Field(default_factory=d.CaseEnded)


class CaseFailedEvent(EventBase):
    kind: Literal[K.CASE_FAILED]
    data: d.CaseEnded = Field(default_factory=d.CaseEnded)


class CaseCancelledEvent(EventBase):
    kind: Literal[K.CASE_CANCELLED]
    data: d.CaseEnded = Field(default_factory=d.CaseEnded)


class StepStartedEvent(EventBase):
    kind: Literal[K.STEP_STARTED]
    data: d.StepStarted = Field(default_factory=d.StepStarted)


class StepFinishedEvent(EventBase):
    kind: Literal[K.STEP_FINISHED]
    data: d.StepFinished = Field(default_factory=d.StepFinished)


class RunWaitsForResumeEvent(EventBase):
    kind: Literal[K.RUN_WAITS_FOR_RESUME]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class RunWaitsForHoldEvent(EventBase):
    kind: Literal[K.RUN_WAITS_FOR_HOLD]
    data: d.HoldWait


class RunWaitsForSandboxEvent(EventBase):
    kind: Literal[K.RUN_WAITS_FOR_SANDBOX]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class RunWaitsForApplyEvent(EventBase):
    kind: Literal[K.RUN_WAITS_FOR_APPLY]
    data: d.RunWaitsForApply


class RunSandboxDownEvent(EventBase):
    kind: Literal[K.RUN_SANDBOX_DOWN]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class AttemptSetAsideEvent(EventBase):
    kind: Literal[K.ATTEMPT_SET_ASIDE]
    data: d.AttemptSetAside


class AnalysisEditedSystemEvent(EventBase):
    kind: Literal[K.ANALYSIS_EDITED_SYSTEM]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class ApplyWaitsForLockEvent(EventBase):
    kind: Literal[K.APPLY_WAITS_FOR_LOCK]
    data: d.NoData = Field(default_factory=d.NoData)


class ApplyRecoveredEvent(EventBase):
    kind: Literal[K.APPLY_RECOVERED]
    data: d.NoData = Field(default_factory=d.NoData)


class ApplyAbandonedEvent(EventBase):
    kind: Literal[K.APPLY_ABANDONED]
    data: d.NoData = Field(default_factory=d.NoData)


class MemorySubmittedEvent(EventBase):
    kind: Literal[K.MEMORY_SUBMITTED]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class SpendRecordedEvent(EventBase):
    kind: Literal[K.SPEND_RECORDED]
    data: d.EvalTagged = Field(default_factory=d.EvalTagged)


class TuningHeldEvent(EventBase):
    kind: Literal[K.TUNING_HELD]
    data: d.TuningHeld


class TuningReleasedEvent(EventBase):
    kind: Literal[K.TUNING_RELEASED]
    data: d.NoData = Field(default_factory=d.NoData)


class BreakerOpenedEvent(EventBase):
    kind: Literal[K.BREAKER_OPENED]
    data: d.NoData = Field(default_factory=d.NoData)


class BreakerProbedEvent(EventBase):
    kind: Literal[K.BREAKER_PROBED]
    data: d.BreakerProbed


class BreakerClosedEvent(EventBase):
    kind: Literal[K.BREAKER_CLOSED]
    data: d.NoData = Field(default_factory=d.NoData)


class StoreFullEvent(EventBase):
    kind: Literal[K.STORE_FULL]
    data: d.NoData = Field(default_factory=d.NoData)


class StoreRecoveredEvent(EventBase):
    kind: Literal[K.STORE_RECOVERED]
    data: d.NoData = Field(default_factory=d.NoData)


class GoalStartedEvent(EventBase):
    kind: Literal[K.GOAL_STARTED]
    data: d.NoData = Field(default_factory=d.NoData)


class GoalResumedEvent(EventBase):
    kind: Literal[K.GOAL_RESUMED]
    data: d.NoData = Field(default_factory=d.NoData)


class IterationStartedEvent(EventBase):
    kind: Literal[K.ITERATION_STARTED]
    data: d.NoData = Field(default_factory=d.NoData)


class GoalRequeuedEvent(EventBase):
    kind: Literal[K.GOAL_REQUEUED]
    data: d.Requeued = Field(default_factory=d.Requeued)


class StepWaitsForResumeEvent(EventBase):
    kind: Literal[K.STEP_WAITS_FOR_RESUME]
    data: d.NoData = Field(default_factory=d.NoData)


class StepWaitsForHoldEvent(EventBase):
    kind: Literal[K.STEP_WAITS_FOR_HOLD]
    data: d.StepWaitsForHold = Field(default_factory=d.StepWaitsForHold)


class StepWaitsForSandboxEvent(EventBase):
    kind: Literal[K.STEP_WAITS_FOR_SANDBOX]
    data: d.NoData = Field(default_factory=d.NoData)


class StepSetAsideEvent(EventBase):
    kind: Literal[K.STEP_SET_ASIDE]
    data: d.StepSetAside


class PlanInvalidEvent(EventBase):
    kind: Literal[K.PLAN_INVALID]
    data: d.NoData = Field(default_factory=d.NoData)


class ReviewInvalidEvent(EventBase):
    kind: Literal[K.REVIEW_INVALID]
    data: d.NoData = Field(default_factory=d.NoData)


class ReviewCompleteTooEarlyEvent(EventBase):
    kind: Literal[K.REVIEW_COMPLETE_TOO_EARLY]
    data: d.NoData = Field(default_factory=d.NoData)


class GoalCompletedEvent(EventBase):
    kind: Literal[K.GOAL_COMPLETED]
    data: d.GoalEnded = Field(default_factory=d.GoalEnded)


class GoalIncompleteEvent(EventBase):
    kind: Literal[K.GOAL_INCOMPLETE]
    data: d.GoalEnded = Field(default_factory=d.GoalEnded)


class GoalFailedEvent(EventBase):
    kind: Literal[K.GOAL_FAILED]
    data: d.GoalEnded = Field(default_factory=d.GoalEnded)


class GoalCancelledEvent(EventBase):
    kind: Literal[K.GOAL_CANCELLED]
    data: d.GoalEnded = Field(default_factory=d.GoalEnded)


class EvalCreatedEvent(EventBase):
    kind: Literal[K.EVAL_CREATED]
    data: d.EvalCreated


class EvalItemStartedEvent(EventBase):
    kind: Literal[K.EVAL_ITEM_STARTED]
    data: d.EvalItemStarted


class EvalItemSetAsideEvent(EventBase):
    kind: Literal[K.EVAL_ITEM_SET_ASIDE]
    data: d.EvalItemSetAside


class EvalItemRequeuedEvent(EventBase):
    kind: Literal[K.EVAL_ITEM_REQUEUED]
    data: d.EvalItemRequeued


class EvalItemEndedEvent(EventBase):
    kind: Literal[K.EVAL_ITEM_ENDED]
    data: d.EvalItemEnded


class GateStartedEvent(EventBase):
    kind: Literal[K.GATE_STARTED]
    data: d.GateStarted


class GatePassedEvent(EventBase):
    kind: Literal[K.GATE_PASSED]
    data: d.GateVerdict


class GateRejectedEvent(EventBase):
    kind: Literal[K.GATE_REJECTED]
    data: d.GateVerdict


class CandidateRebasedEvent(EventBase):
    kind: Literal[K.CANDIDATE_REBASED]
    data: d.CandidateRebased


class CandidateAwaitsApprovalEvent(EventBase):
    kind: Literal[K.CANDIDATE_AWAITS_APPROVAL]
    data: d.CandidateAwaitsApproval


class CandidateDecidedEvent(EventBase):
    kind: Literal[K.CANDIDATE_DECIDED]
    data: d.CandidateDecided


class GateAbandonedEvent(EventBase):
    kind: Literal[K.GATE_ABANDONED]
    data: d.GateAbandoned
