"""A goal's durable state (`GOAL_STATE.json`), its iterations (`ITERATION_STATE.json`) and its trace
(`GOAL_TRACE.jsonl`), as the fleet writes them: the worker holding the goal's lease is the only writer.

The state carries every trace event (they are few); the trace file is derived from it, so a worker that
resumes a goal appends exactly the events the file lacks and never one twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.goal import GoalLimits, GoalStatus, GoalStep, Limit
from service.core.models.records import Usage

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
    duration_ms: int = Field(default=0, ge=0)


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
    """The work step as the fleet recorded it: the agent's result and what the fleet measured."""

    model_config = ConfigDict(extra="forbid")

    result: WorkerResult
    tasks_finished: int = Field(default=0, ge=0, description="Counted from the progress log.")
    tasks_failed: int = Field(default=0, ge=0, description="Counted from the progress log.")
    workspace_before: str | None = Field(default=None, description="The workspace's commit before the work.")
    workspace_after: str | None = Field(default=None, description="Its commit after the work.")
    duration_ms: int = Field(default=0, ge=0)


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
    duration_ms: int = Field(default=0, ge=0)


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
    at: datetime
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    iteration: int | None = None
    step: GoalStep | None = None
    detail: str | None = None
    worker: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


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
    trace: list[TraceEvent] = Field(default_factory=list)

    def current(self) -> IterationState | None:
        return self.iterations[-1] if self.iterations else None


class GoalSummary(BaseModel):
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
