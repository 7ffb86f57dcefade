"""`gate:` in a tuning file: which cases a candidate version is evaluated on, how many, how often, and
the rule that accepts it. No `gate:` (the default): every apply is published as it is made."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GateCases = Literal["passed", "folder", "both"]
"""`passed`: the tuning's cases that have passed (completed); `folder`: the cases of a fixed regression
folder; `both`: the two together."""


class GateConfig(BaseModel):
    """The acceptance gate on every apply."""

    model_config = ConfigDict(extra="forbid")

    cases: GateCases = Field(default="passed", description="Where the gate's cases come from.")
    folder: Path | None = Field(
        default=None,
        description="A folder of regression cases (relative to the tuning file), for cases `folder` or "
        "`both`.",
    )
    sample: int = Field(
        default=20, ge=1, le=10_000, description="At most this many gate cases, drawn with `seed`."
    )
    seed: int = Field(default=0, description="Seeds the draw of the sample.")
    repeats: int = Field(default=1, ge=1, le=100, description="Runs of each gate case on the candidate.")
    max_drop: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The rule. None: no gate case that passed may fail on the candidate. A number in "
        "[0, 1]: the pass rate on the gate's cases may drop by at most this much.",
    )

    def needs_folder(self) -> bool:
        return self.cases in ("folder", "both")
