"""A tuning's held-out split: cases that are never tuned on, only evaluated (docs/evaluation.md).

Either a fraction of the tuning's cases, drawn once with a seed, or a folder of cases of their own.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.core.models.case import Slug


class HoldoutConfig(BaseModel):
    """`holdout:` in a tuning file."""

    model_config = ConfigDict(extra="forbid")

    fraction: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="The share of the tuning's cases held out, in (0, 1); drawn once, with `seed`.",
    )
    seed: int = Field(default=0, description="Seeds the draw of a fraction.")
    cases: Path | None = Field(
        default=None,
        description="A folder of held-out cases, apart from the tuning's `cases` (relative to the "
        "tuning file).",
    )
    repeats: int = Field(default=1, ge=1, le=100, description="Runs of each held-out case per evaluation.")

    @model_validator(mode="after")
    def _one_source(self) -> HoldoutConfig:
        if (self.fraction is None) == (self.cases is None):
            raise ValueError("give either `fraction` (with a `seed`) or `cases` (a folder), not both")
        return self


class HeldOut(BaseModel):
    """`holdout.json` in the tuning's folder: the split as drawn when the tuning was first registered.
    Kept: a case once tuned on never becomes held out, nor the reverse."""

    model_config = ConfigDict(extra="forbid")

    config: HoldoutConfig
    ids: list[Slug] = Field(description="The held-out case ids, sorted.")
    train: list[Slug] = Field(default_factory=list, description="The tuning's case ids at the draw, sorted.")
