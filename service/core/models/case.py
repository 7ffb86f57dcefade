"""A test case as the user writes it (YAML or JSON) and as the store keeps it."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    NonNegativeFloat,
    StringConstraints,
    field_validator,
)

SLUG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,127}$"
"""A slug for pydantic and JSON Schema, whose `$` is the end of the text (Rust's and ECMAScript's)."""
_SLUG_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
"""The same for Python, only ever used through `is_slug`: Python's `$` also matches before a final
newline, so `re.match` with it would take `"x\n"` for a slug."""

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
"""A safe identifier: lower-case letters, digits, `.`, `_`, `-`; never a path."""


REV_MAX = 2**31 - 1
"""The highest case rev: a rev names a folder (`r<rev>`) and a queue id, so it is bounded where it enters
(a case file, an HTTP body) rather than found too long for a file name on a worker."""
Rev = Annotated[int, Field(ge=1, le=REV_MAX)]


def is_slug(value: str) -> bool:
    """Whether `value` is a safe slug, the whole of it: the one id check of every front end (the HTTP
    API's path parameters, the CLI's ids, evaluation names), so none can name a path."""
    return _SLUG_RE.fullmatch(value) is not None


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
    weight: NonNegativeFloat = 1.0


class RunTask(BaseModel):
    """What the runner may see of a case: the task, never how it is graded (no rubric, no demo mapping).
    A command runner gets it as `input.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case: Slug
    rev: Rev
    input: str


class Case(BaseModel):
    """One test case: what the agent is asked and how the run is graded (as the store keeps it)."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    rev: Rev = Field(default=1, description=f"The case's revision (1 to {REV_MAX}); a new rev runs again.")
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
