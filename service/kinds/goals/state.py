"""A goal's durable state (`GOAL_STATE.json`), its iterations (`ITERATION_STATE.json`) and its trace
(`GOAL_TRACE.jsonl`), as the fleet writes them: the worker holding the goal's lease is the only writer.

The state carries every trace event (they are few); the trace file is derived from it, so a worker that
resumes a goal appends exactly the events the file lacks and never one twice. Two things reach the goal
besides its holder's writes: a cancel (`cancel`, written by whoever cancels, kept by every later write)
and spend that no holder could write (`GOAL_SPENT.jsonl`, folded into `spent` by the next holder).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from service.core.models.events import EventKind
from service.core.models.records import CancelRequest, Usage, utc_now
from service.core.models.redis_value import RedisValue
from service.kinds.goals.models import GOAL_ENDS, GoalLimits, GoalStatus, GoalStep, Limit

GOAL_STATE_SCHEMA_VERSION: Literal[1] = 1


class TodoTask(BaseModel):
    """One checkbox item of a TODO: `- [ ] <id>: <title>`."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    done: bool = False


class PlanRecord(BaseModel):
    """What the plan step produced: a valid TODO (kept as `iterations/NN/TODO.md`) or why it is not."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[TodoTask] = Field(default_factory=list)
    error: str | None = Field(default=None, description="Why the TODO is invalid (the iteration fails).")
    summary: str | None = None
    duration_ms: NonNegativeInt = 0


class ProgressEntry(BaseModel):
    """One line of the worker's progress log (JSON lines)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    event: Literal["started", "finished", "failed"]
    summary: str = ""
    attempt: int = Field(default=1, ge=1)
    at: datetime | None = None


class WorkerResult(BaseModel):
    """What the worker's agent reports at the end of the work step (`worker_result.json`)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "partial", "failed"]
    summary: str = Field(max_length=20_000)
    task_results: str | None = Field(
        default=None, description="The task results' file, relative to the iteration's folder."
    )


class WorkRecord(BaseModel):
    """The work step as the fleet recorded it: the agent's result and what the fleet observed."""

    model_config = ConfigDict(extra="forbid")

    result: WorkerResult
    tasks_finished: NonNegativeInt = Field(default=0, description="Counted from the fleet's progress log.")
    tasks_failed: NonNegativeInt = Field(default=0, description="Counted from the fleet's progress log.")
    attempts: int = Field(
        default=1, ge=1, description="Calls of the worker's agent (at most attempts_per_task)."
    )
    error: str | None = Field(
        default=None, description="How the worker's agent failed, if it did (its exit, an unreadable result)."
    )
    workspace_before: str | None = Field(default=None, description="The workspace's commit before the work.")
    workspace_after: str | None = Field(default=None, description="Its commit after the work.")
    duration_ms: NonNegativeInt = 0


class Review(BaseModel):
    """The reviewer's answer (`review.json`)."""

    model_config = ConfigDict(extra="forbid")

    decision: str = Field(min_length=1, max_length=200)
    complete: bool
    summary: str = Field(max_length=20_000)
    rationale: str = Field(max_length=20_000)
    remaining_work: list[str] = Field(default_factory=list, max_length=100)


class ReviewRecord(BaseModel):
    """The review step as the fleet recorded it."""

    model_config = ConfigDict(extra="forbid")

    review: Review
    duration_ms: NonNegativeInt = 0


class Completion(BaseModel):
    """How the goal ended, and why: the limit it reached, if one."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "incomplete", "failed", "cancelled"]
    reason: str
    limit: Limit | None = None
    at: datetime


IterationStatus = Literal["planning", "working", "reviewing", "reviewed", "failed", "ended"]


class IterationState(BaseModel):
    """One iteration (`iterations/NN/ITERATION_STATE.json`)."""

    model_config = ConfigDict(extra="forbid")

    iteration: int = Field(ge=1)
    status: IterationStatus = "planning"
    started_at: datetime
    updated_at: datetime
    deadline_at: datetime
    plan: PlanRecord | None = None
    work: WorkRecord | None = None
    review: ReviewRecord | None = None
    error: str | None = Field(default=None, description="Why the iteration failed.")
    workspace_base: str | None = Field(
        default=None, description="The workspace commit the iteration starts from."
    )
    spent: Usage = Field(default_factory=Usage, description="What the iteration's steps spent.")
    voids: dict[str, int] = Field(default_factory=dict, description="step -> void runs set aside.")
    voids_counted: dict[str, int] = Field(
        default_factory=dict, description="step -> voids counted against an earlier failure of the goal."
    )
    completion: Completion | None = Field(default=None, description="Set when the goal ended in it.")


class TraceEvent(BaseModel):
    """One line of `GOAL_TRACE.jsonl`; `seq` numbers them from 1, with no gap and no repeat."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1)
    at: datetime = Field(default_factory=utc_now)
    kind: EventKind
    iteration: int | None = None
    step: GoalStep | None = None
    detail: str | None = None
    worker: str | None = None
    duration_ms: int | None = Field(default=None, ge=0, description="A finished step's duration.")
    spent: Usage | None = Field(default=None, description="What a finished step (or a late spend) cost.")
    data: dict[str, Any] = Field(default_factory=dict)


class GoalSpend(BaseModel):
    """A line of `GOAL_SPENT.jsonl`: what a step's agent spent that no holder could record in the state
    (the step was cut short and the lease then lost); the next holder adds it to the goal's `spent`."""

    model_config = ConfigDict(extra="forbid")

    at: datetime = Field(default_factory=utc_now)
    iteration: int = Field(ge=1)
    step: GoalStep
    usage: Usage


class GoalState(BaseModel):
    """`GOAL_STATE.json`, validated on every write and read."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = GOAL_STATE_SCHEMA_VERSION
    goal_id: str
    goal: str
    status: GoalStatus
    limits: GoalLimits
    tuning: str | None = None
    version: str | None = Field(default=None, description="The tuning's system version the goal runs on.")
    workspace: str | None = Field(default=None, description="The workspace's current commit.")
    spent: Usage = Field(default_factory=Usage, description="What the goal's steps were measured to spend.")
    started_at: datetime
    updated_at: datetime
    deadline_at: datetime
    iterations: list[IterationState] = Field(default_factory=list)
    completion: Completion | None = None
    cancel: CancelRequest | None = Field(default=None, description="A cancel not carried out yet.")
    spent_lines: NonNegativeInt = Field(default=0, description="Lines of GOAL_SPENT.jsonl added to `spent`.")
    trace: list[TraceEvent] = Field(default_factory=list)

    def current(self) -> IterationState | None:
        return self.iterations[-1] if self.iterations else None

    def record(
        self,
        kind: EventKind,
        worker: str | None,
        iteration: int | None = None,
        step: GoalStep | None = None,
        detail: str | None = None,
        **fields: Any,
    ) -> TraceEvent:
        """Add an event to the trace (`fields`: duration_ms, spent, data)."""
        event = TraceEvent(
            seq=len(self.trace) + 1,
            kind=kind,
            iteration=iteration,
            step=step,
            detail=detail,
            worker=worker,
            **fields,
        )
        self.trace.append(event)
        return event

    def restart(self) -> None:
        """A failed goal started again: queued, to go on where it failed, its voids counted afresh."""
        self.status, self.completion = "queued", None
        current = self.current()
        if current is not None:
            current.completion, current.voids_counted = None, dict(current.voids)

    def finish(self, completion: Completion, worker: str | None) -> None:
        """End the goal: its status, its completion (and its current iteration's), its event."""
        self.status = completion.status
        self.completion = completion
        self.cancel = None
        current = self.current()
        if current is not None:
            current.completion = completion
        iteration = current.iteration if current else None
        data = {"limit": completion.limit}
        self.record(GOAL_ENDS[completion.status], worker, iteration, None, completion.reason, data=data)


class GoalSummary(RedisValue):
    """A goal as status, the API and the metrics list it (the Redis hash `tf:goals`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: GoalStatus
    iteration: int = 0
    step: GoalStep | None = None
    worker: str | None = None
    tuning: str | None = None
    reason: str | None = None
    limit: Limit | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    updated_at: datetime
