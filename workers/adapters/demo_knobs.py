"""The knobs of the built-in demo agents: how they behave on a case (`DemoKnobs`) or a goal
(`GoalDemoKnobs`), read from the case's or the spec's open `demo:` mapping.

The core keeps that mapping as written (service.core.models.case.DemoMapping); the demo agents alone
validate it, when they take a step. Its `expect` entry, the outcome the demo is built to reach, is
`tunefleet demo`'s to read (service.cli.demo, service.goals.demo): the agents leave it alone.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from service.core.models.case import DemoMapping, Slug
from service.core.models.goal import GoalStep
from service.core.validation import describe_validation
from workers.errors import JobFault

EXPECT_DESCRIPTION = (
    "The outcome the demo is built to reach: `tunefleet demo` checks it; the agents ignore it."
)


class DemoKnobs(BaseModel):
    """How the built-in demo agents behave on this case (ignored by command adapters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Slug] = Field(
        default_factory=list,
        description="Rules the system's prose must hold for a run to pass; each apply adds the missing ones.",
    )
    rules_per_apply: int = Field(default=1, ge=1, description="How many missing rules one apply adds.")
    forbids: list[Slug] = Field(
        default_factory=list,
        description="Rules the system's prose must not hold for a run to pass: an apply that adds one for "
        "another case breaks this one.",
    )
    flawed: bool = Field(default=False, description="The case itself is wrong: findings target the dataset.")
    structural: bool = Field(default=False, description="Fixing the prose needs a structural change.")
    memory_helps: bool = Field(default=True, description="A run that starts from memory passes.")
    voids: dict[str, int] = Field(
        default_factory=dict,
        description="`<phase>-<attempt>` -> how many runs of that try are void before one is not.",
    )
    kills: dict[str, int] = Field(
        default_factory=dict,
        description="`<phase>-<attempt>` -> how many runs of that try are killed for memory (exit 137).",
    )
    kills_worker: int = Field(
        default=0, ge=0, description="How many runs of the case SIGKILL their whole worker process (poison)."
    )
    latency_ms: int | None = Field(default=None, ge=0, description="Overrides the tuning's demo latency.")
    tokens: int = Field(default=1200, ge=0, description="Tokens one step reports.")
    expect: JsonValue = Field(default=None, description=EXPECT_DESCRIPTION)


class StepHang(BaseModel):
    """A demo step that never ends by itself (a limit or a cancel must end it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: GoalStep
    iteration: int = Field(default=1, ge=1)


class GoalDemoKnobs(BaseModel):
    """How the built-in demo agents behave on this goal (ignored by other adapters); deterministic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    tokens: int = Field(default=0, ge=0, description="Tokens each demo step reports spending.")
    kills_worker: int = Field(
        default=0, ge=0, description="How many work steps SIGKILL their whole worker process (poison)."
    )
    expect: JsonValue = Field(default=None, description=EXPECT_DESCRIPTION)


Knobs = TypeVar("Knobs", DemoKnobs, GoalDemoKnobs)


def read_knobs(model: type[Knobs], demo: DemoMapping, owner: str) -> Knobs:
    """The demo mapping of `owner` (a case, a goal) as `model`; JobFault naming the field and what was
    expected when it is not one: the job ends failed, for a reason of its own."""
    try:
        return model.model_validate(demo)
    except ValidationError as exc:
        raise JobFault(describe_validation(exc, f"{owner}: demo")) from None
