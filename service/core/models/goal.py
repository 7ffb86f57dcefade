"""A goal as the user writes it (`tunefleet goal start SPEC.yaml`) and as the store keeps it
(`GOAL_SPEC.json`): the text, the acceptance criteria, the agents, the workspace and the limits.

A goal is pursued in iterations of three steps (docs/goals.md): the planner (the analyzer's agent
with a plan brief) writes a TODO, the runner's agent works it in the goal's workspace, the reviewer
(the analyzer's agent with a review brief) says whether the goal is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.case import Slug
from service.core.models.tuning import Adapter

GoalStep = Literal["plan", "work", "review"]
GOAL_STEPS: tuple[GoalStep, ...] = ("plan", "work", "review")

GoalStatus = Literal["queued", "running", "completed", "incomplete", "failed", "cancelled"]
FINAL_STATUSES: frozenset[str] = frozenset({"completed", "incomplete", "failed", "cancelled"})

GOAL_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "runner": frozenset(
        {"brief", "input", "todo", "progress", "worker_result", "output"}
        | {"workspace", "system", "home", "iteration", "step"}
    ),
    "analyzer": frozenset(
        {"brief", "todo", "progress", "worker_result", "changes", "review", "output"}
        | {"workspace", "system", "home", "iteration", "step"}
    ),
}
"""The `{name}` placeholders of a command agent's argv in goal steps, by role: the runner's agent works
(work), the analyzer's plans and reviews (plan, review); docs/adapters.md, "Goal steps"."""

Limit = Literal["min_iterations", "max_iterations", "timeout", "iteration_timeout", "reviewer_timeout"]


class GoalLimits(BaseModel):
    """The limits a goal runs under, all resolved (the spec's, else the settings' defaults)."""

    model_config = ConfigDict(extra="forbid")

    min_iterations: int = Field(ge=1, description="Iterations before a review may complete the goal.")
    max_iterations: int = Field(ge=1, description="Iterations after which the goal ends incomplete.")
    timeout_s: float = Field(gt=0, description="The whole run's deadline, from its first start.")
    iteration_timeout_s: float = Field(gt=0, description="Each iteration's deadline, from its start.")
    reviewer_timeout_s: float = Field(gt=0, description="How long one review may take.")
    attempts_per_task: int = Field(ge=1, description="Attempts the worker makes at each TODO task.")
    max_voids: int = Field(ge=1, description="Void steps in a row before the goal ends failed.")


class GoalLimitsSpec(BaseModel):
    """The limits as a spec may give them; an absent one takes the fleet's default (settings)."""

    model_config = ConfigDict(extra="forbid")

    min_iterations: int | None = Field(default=None, ge=1)
    max_iterations: int | None = Field(default=None, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    iteration_timeout_s: float | None = Field(default=None, gt=0)
    reviewer_timeout_s: float | None = Field(default=None, gt=0)
    attempts_per_task: int | None = Field(default=None, ge=1)
    max_voids: int | None = Field(default=None, ge=1)


class StepHang(BaseModel):
    """A demo step that never ends by itself (a limit or a cancel must end it)."""

    model_config = ConfigDict(extra="forbid")

    step: GoalStep
    iteration: int = Field(default=1, ge=1)


class GoalDemoKnobs(BaseModel):
    """How the built-in demo agents behave on this goal (ignored by other adapters); deterministic."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(default=2, ge=1, le=50, description="Tasks in each TODO the demo planner writes.")
    task_failures: int = Field(
        default=0, ge=0, description="Failed attempts of every task before one succeeds."
    )
    complete_at: int = Field(default=1, ge=1, description="The iteration whose review says complete.")
    invalid_todo: list[int] = Field(
        default_factory=list, description="Iterations whose plan is an invalid TODO (no tasks)."
    )
    hang: StepHang | None = None
    voids: dict[GoalStep, int] = Field(
        default_factory=dict, description="step -> how many of its first runs are void (per iteration)."
    )
    step_ms: int = Field(default=100, ge=0, description="How long each demo step takes.")


class GoalExpectation(BaseModel):
    """The outcome a demo goal is built to reach, shown beside the real one."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "incomplete", "failed", "cancelled"]
    limit: Limit | None = None


class GoalSpec(BaseModel):
    """`GOAL_SPEC.json`; the YAML a user writes has the same fields."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    goal: str = Field(min_length=1, description="What is to be achieved, in words.")
    acceptance: list[str] = Field(
        default_factory=list, description="Acceptance criteria the reviewer checks the work against."
    )
    workspace: Path | None = Field(
        default=None,
        description="A folder (or a git repository's work tree) copied in as the goal's starting workspace.",
    )
    tuning: Slug | None = Field(
        default=None,
        description="Run against this tuning's current system version; its runner and analyzer are the "
        "goal's agents unless the spec gives its own.",
    )
    runner: Adapter | None = Field(default=None, description="The worker's agent (default: demo).")
    analyzer: Adapter | None = Field(default=None, description="The planner's and reviewer's agent.")
    limits: GoalLimitsSpec = Field(default_factory=GoalLimitsSpec)
    demo: GoalDemoKnobs = Field(default_factory=GoalDemoKnobs)
    expect: GoalExpectation | None = Field(default=None, description="The outcome a demo goal is built for.")
