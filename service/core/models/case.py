"""A test case as the user writes it (YAML or JSON) and as the store keeps it."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

SLUG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,127}$"
SLUG_RE = re.compile(SLUG_PATTERN)

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
"""A safe identifier: lower-case letters, digits, `.`, `_`, `-`; never a path."""

State = Literal["completed", "difficult", "failed", "cancelled"]


class RubricItem(BaseModel):
    """One graded item of a case's rubric."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    text: str = Field(min_length=1, description="What the grader checks.")
    weight: float = Field(default=1.0, ge=0)


class DemoKnobs(BaseModel):
    """How the built-in demo agents behave on this case (ignored by command adapters)."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Slug] = Field(
        default_factory=list,
        description="Rules the system's prose must hold for a run to pass; each apply adds the missing ones.",
    )
    rules_per_apply: int = Field(default=1, ge=1, description="How many missing rules one apply adds.")
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


class Expectation(BaseModel):
    """The outcome a demo case is built to reach, shown beside the real one."""

    model_config = ConfigDict(extra="forbid")

    state: State
    reason: str | None = Field(default=None, description="Prefix the real reason must start with.")


class RunTask(BaseModel):
    """What the runner may see of a case: the task, never how it is graded (no rubric, no expectation,
    no demo knobs). A command runner gets it as `input.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case: Slug
    rev: int = Field(ge=1)
    input: str


class Case(BaseModel):
    """One test case: what the agent is asked and how the run is graded (as the store keeps it)."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    rev: int = Field(default=1, ge=1, description="The case's revision; a new rev runs again.")
    input: str = Field(min_length=1, description="What the agent is asked to do.")
    rubric: list[RubricItem] = Field(min_length=1)
    demo: DemoKnobs = Field(default_factory=DemoKnobs)
    expect: Expectation | None = None

    @field_validator("rubric")
    @classmethod
    def _unique_rubric_ids(cls, items: list[RubricItem]) -> list[RubricItem]:
        seen: set[str] = set()
        for item in items:
            if item.id in seen:
                raise ValueError(f"duplicate rubric id {item.id!r}")
            seen.add(item.id)
        return items

    @property
    def rubric_ids(self) -> list[str]:
        return [item.id for item in self.rubric]

    def task(self) -> RunTask:
        """The part of the case the runner is given."""
        return RunTask(case=self.id, rev=self.rev, input=self.input)
