"""The knobs of the built-in demo agents: how they behave on a case (`DemoKnobs`) or a goal
(`GoalDemoKnobs`), read from the case's or the spec's open `demo:` mapping.

The core keeps that mapping as written (service.core.models.case.DemoMapping); the demo agents alone
validate it, when they take a step. Its `expect` entry, the outcome the demo is built to reach, is
`tunefleet demo`'s to read (service.cli.demo, service.kinds.goals.demo): the agents leave it alone.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt, ValidationError

from service.core.models.case import DemoMapping
from service.core.validation import describe_validation
from service.kinds.cases.truth import WorldKnobs
from service.kinds.goals.models import GoalStep
from workers.errors import JobFault

EXPECT_DESCRIPTION = (
    "The outcome the demo is built to reach: `tunefleet demo` checks it; the agents ignore it."
)


class DemoKnobs(WorldKnobs):
    """How the built-in demo agents behave on this case (ignored by command adapters): whether a run
    passes (`WorldKnobs`, with the ground truth beside them in service.kinds.cases.truth), the faults
    they inject, their latency and their tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules_per_apply: int = Field(default=1, ge=1, description="How many missing rules one apply adds.")
    structural: bool = Field(default=False, description="Fixing the prose needs a structural change.")
    voids: dict[str, int] = Field(
        default_factory=dict,
        description="`<phase>-<attempt>` -> how many runs of that try are void before one is not.",
    )
    fails: list[str] = Field(
        default_factory=list,
        description="`<phase>-<attempt>` tries whose run fails whatever the prose holds (a failure by "
        "chance, as a random agent has: the same version passes another try).",
    )
    kills: dict[str, int] = Field(
        default_factory=dict,
        description="`<phase>-<attempt>` -> how many runs of that try are killed for memory (exit 137).",
    )
    kills_worker: NonNegativeInt = Field(
        default=0, description="How many runs of the case SIGKILL their whole worker process (poison)."
    )
    latency_ms: int | None = Field(default=None, ge=0, description="Overrides the tuning's demo latency.")
    tokens: NonNegativeInt = Field(default=1200, description="Tokens one step reports.")
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
    task_failures: NonNegativeInt = Field(
        default=0, description="Failed attempts of every task before one succeeds."
    )
    complete_at: int = Field(default=1, ge=1, description="The iteration whose review says complete.")
    invalid_todo: list[int] = Field(
        default_factory=list, description="Iterations whose plan is an invalid TODO (no tasks)."
    )
    hang: StepHang | None = None
    voids: dict[GoalStep, int] = Field(
        default_factory=dict, description="step -> how many of its first runs are void (per iteration)."
    )
    step_ms: NonNegativeInt = Field(default=100, description="How long each demo step takes.")
    tokens: NonNegativeInt = Field(default=0, description="Tokens each demo step reports spending.")
    kills_worker: NonNegativeInt = Field(
        default=0, description="How many work steps SIGKILL their whole worker process (poison)."
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
