"""The contract between the goal loop and its agents: one call per step (plan, work, review).

Every agent, in-process or not, works in the step's own folder (workers.adapters.folder: `in/`, `out/`,
`home/`) and hands its results back as files in `out/`, which the fleet reads and validates:

    plan     out/TODO.md                (and optionally out/plan.json: {"summary": "..."})
    work     out/worker_result.json     out/progress.jsonl   (and optionally out/task_results.json)
             and its edits in the step's `workspace/` (a private copy of the goal's workspace); one call
             is one attempt at each task of the TODO it is given: the fleet calls again with the tasks
             still open, up to `attempts_per_task` calls, and keeps its own progress log
    review   out/review.json

The fleet bounds each call with the step's deadline by cancelling it: cancelling the coroutine ends
the agent's processes (TERM, then KILL after the grace period) before the cancellation propagates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.case import DemoMapping
from service.kinds.goals.models import GoalStep
from workers.adapters.base import StepExit

PLAN_OUTPUT = "TODO.md"
PLAN_SUMMARY = "plan.json"
WORK_RESULT = "worker_result.json"
WORK_PROGRESS = "progress.jsonl"
WORK_TASK_RESULTS = "task_results.json"
REVIEW_OUTPUT = "review.json"


class GoalBrief(BaseModel):
    """What every goal step is told (`in/brief.json`)."""

    model_config = ConfigDict(extra="forbid")

    step: GoalStep
    goal: str
    acceptance: list[str]
    iteration: int = Field(ge=1)
    min_iterations: int
    max_iterations: int
    attempts_per_task: int = Field(description="Calls the fleet makes of the work step at most.")
    attempt: int = Field(
        default=1, ge=1, description="This work call's attempt at each task of its TODO (1 for plan, review)."
    )
    remaining_work: list[str] = Field(
        default_factory=list, description="The previous review's remaining work (what to plan next)."
    )
    earlier: list[dict[str, Any]] = Field(
        default_factory=list, description="Earlier iterations: their plan error or review, in order."
    )


class PlanSummary(BaseModel):
    """The planner's optional `out/plan.json`: a line on the TODO, kept in GOAL_RESULT.md."""

    model_config = ConfigDict(extra="ignore")

    summary: str = Field(min_length=1, max_length=2_000)


class GoalStepRequest(BaseModel):
    """One step of one iteration, in its own fresh folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal_id: str
    step: GoalStep
    iteration: int = Field(ge=1)
    step_dir: Path
    log_file: Path
    brief: GoalBrief
    workspace_dir: Path = Field(
        description="The goal's workspace: a private writable copy (work) or a read-only tree (plan, review)."
    )
    system_dir: Path = Field(description="The tuning's system version (read-only), or an empty folder.")
    inputs: dict[str, Path] = Field(
        default_factory=dict,
        description="The step's input files in `in/` by name: todo, progress, worker_result, changes.",
    )
    run_index: int = Field(default=1, ge=1, description="1 for the step's first run, +1 per void one.")
    demo: DemoMapping = Field(description="The spec's demo mapping, for the in-process demo agents only.")


class GoalStepExit(StepExit):
    """How a goal step's agent ended (its results are its `out/` files)."""

    void: str | None = Field(default=None, description="The step says nothing: set aside and run again.")


class GoalAgent(Protocol):
    """One agent, able to take the goal steps of its role (the runner works; the analyzer plans and
    reviews)."""

    async def goal_step(self, request: GoalStepRequest) -> GoalStepExit: ...
