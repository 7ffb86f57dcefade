"""A goal as the user writes it (`tunefleet goal start SPEC.yaml`) and as the store keeps it
(`GOAL_SPEC.json`): the text, the acceptance criteria, the agents, the workspace and the limits.

A goal is pursued in iterations of three steps (docs/goals.md): the planner (the analyzer's agent
with a plan brief) writes a TODO, the runner's agent works it in the goal's workspace, the reviewer
(the analyzer's agent with a review brief) says whether the goal is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from service.core.models.case import DemoMapping, Slug
from service.core.models.events import EventKind
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

Limit = Literal[
    "min_iterations", "max_iterations", "timeout", "iteration_timeout", "reviewer_timeout", "budget"
]
"""What ended a goal `incomplete` (`budget`: its tuning's per-job budget, docs/goals.md)."""


class GoalLimits(BaseModel):
    """The limits a goal runs under, all resolved (the spec's, else the settings' defaults)."""

    model_config = ConfigDict(extra="forbid")

    min_iterations: int = Field(ge=1, description="Iterations before a review may complete the goal.")
    max_iterations: int = Field(ge=1, description="Iterations after which the goal ends incomplete.")
    timeout_s: PositiveFloat = Field(description="The whole run's deadline, from its first start.")
    iteration_timeout_s: PositiveFloat = Field(description="Each iteration's deadline, from its start.")
    reviewer_timeout_s: PositiveFloat = Field(description="How long one review may take.")
    attempts_per_task: int = Field(
        ge=1, description="Attempts the fleet gives each TODO task: one call of the worker's agent each."
    )
    max_voids: int = Field(ge=1, description="Void steps in a row before the goal ends failed.")


DURATION_MAX_S = 30 * 24 * 3600.0
"""The longest timeout a goal spec may ask for (30 days): a deadline is a date, and `1e308` seconds from
now is none (issue 54: it raised OverflowError at every claim)."""
COUNT_MAX = 10_000
"""The most iterations, attempts or voids a goal spec may ask for."""


class GoalLimitsSpec(BaseModel):
    """The limits as a spec may give them; an absent one takes the fleet's default (settings). Each is
    bounded here, where a spec enters (a file, an HTTP body), so no worker meets an absurd one."""

    model_config = ConfigDict(extra="forbid")

    min_iterations: int | None = Field(default=None, ge=1, le=COUNT_MAX)
    max_iterations: int | None = Field(default=None, ge=1, le=COUNT_MAX)
    timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    iteration_timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    reviewer_timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    attempts_per_task: int | None = Field(default=None, ge=1, le=COUNT_MAX)
    max_voids: int | None = Field(default=None, ge=1, le=COUNT_MAX)


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
    demo: DemoMapping = Field(
        default_factory=dict, description="For the demo agents only (docs/adapters.md, `GoalDemoKnobs`)."
    )


GOAL_ENDS: dict[GoalStatus, EventKind] = {
    "completed": EventKind.GOAL_COMPLETED,
    "incomplete": EventKind.GOAL_INCOMPLETE,
    "failed": EventKind.GOAL_FAILED,
    "cancelled": EventKind.GOAL_CANCELLED,
}
"""The kind that ends a goal with each final status."""
