"""A test case as the user writes it (YAML or JSON) and as the store keeps it."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, field_validator

SLUG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,127}$"
SLUG_RE = re.compile(SLUG_PATTERN)

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
"""A safe identifier: lower-case letters, digits, `.`, `_`, `-`; never a path."""

State = Literal["completed", "difficult", "failed", "cancelled"]

DemoMapping = dict[str, JsonValue]
"""A case's or a goal's `demo:` mapping: knobs of the built-in demo agents, and the outcome the demo
expects (`expect`). The core keeps it as written; only the demo adapters (workers.adapters.demo_knobs)
and `tunefleet demo` read it, each validating its own part."""


class RubricItem(BaseModel):
    """One graded item of a case's rubric."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    text: str = Field(min_length=1, description="What the grader checks.")
    weight: float = Field(default=1.0, ge=0)


class RunTask(BaseModel):
    """What the runner may see of a case: the task, never how it is graded (no rubric, no demo mapping).
    A command runner gets it as `input.json`."""

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
    demo: DemoMapping = Field(
        default_factory=dict, description="For the demo agents only (docs/adapters.md, `DemoKnobs`)."
    )

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
