"""What the history of a tuning's instructions is made of, as every front end shows it (CLI, HTTP, client,
dashboard): typed rows, a diff and the reasons behind a version."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from service.core.models.records import Feedback
from service.kinds.evals.gate.models import GateRecord
from service.kinds.evals.stats import Rate

VersionStatus = Literal["initial", "published", "rejected", "candidate"]


class Origin(BaseModel):
    """The case and try whose feedback an apply turned into this version."""

    model_config = ConfigDict(extra="forbid")

    case: str
    rev: int
    phase: str
    attempt: int


class GateFigures(BaseModel):
    """What the acceptance gate (or a guard) said of a version before it was published or rejected."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["passed", "rejected"]
    why: str
    by: str = Field(
        default="gate", description="`gate`, or the guard that rejected it (`leak`, `size`, ...)."
    )
    eval: str | None = Field(default=None, description="The gate's evaluation, if it ran one.")
    items: int = Field(default=0, description="Items the gate evaluated.")
    baseline_rate: float | None = None
    candidate_rate: float | None = None
    broken: list[str] = Field(default_factory=list)
    rebased: bool = False


class EvalRate(BaseModel):
    """One evaluation of a version: its pass rate with its 95 % Wilson interval."""

    model_config = ConfigDict(extra="forbid")

    eval: str
    purpose: str
    created_at: datetime
    rate: Rate


class VersionRow(BaseModel):
    """One version of the instructions: published (or the imported one), or a rejected candidate."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{40}$", description="The commit.")
    status: VersionStatus
    current: bool = Field(default=False, description="It is main, the current version.")
    at: datetime = Field(description="When it was made (its commit's time).")
    parent: str | None = Field(default=None, description="The version it was made on.")
    origin: Origin | None = Field(default=None, description="The case and try it came from.")
    summary: str = Field(default="", description="The applier's summary of its edits.")
    added: NonNegativeInt = Field(default=0, description="Lines added since its parent.")
    removed: NonNegativeInt = Field(default=0, description="Lines removed since its parent.")
    tokens: NonNegativeInt = Field(
        description="Its size: its text files' cl100k_base tokens (history.tokens)."
    )
    gate: GateFigures | None = None
    evals: list[EvalRate] = Field(default_factory=list)


class VersionList(BaseModel):
    """`tunefleet versions TUNING`: its versions and rejected candidates, oldest first."""

    model_config = ConfigDict(extra="forbid")

    tuning: str
    current: str
    versions: list[VersionRow]


class VersionDiff(BaseModel):
    """`tunefleet diff TUNING A B`: the changes from A to B as a unified patch."""

    model_config = ConfigDict(extra="forbid")

    tuning: str
    a: str = Field(description="A as asked.")
    b: str = Field(description="B as asked.")
    a_id: str
    b_id: str
    added: int
    removed: int
    patch: str


class VersionWhy(BaseModel):
    """`tunefleet why TUNING VERSION`: the feedback and analysis that asked for a version, and the evidence
    on which it was published or rejected."""

    model_config = ConfigDict(extra="forbid")

    tuning: str
    version: VersionRow
    feedback: Feedback | None = Field(default=None, description="The grade whose improvements were applied.")
    analysis: str | None = Field(default=None, description="The analyzer's notes (analysis.md).")
    gate: GateRecord | None = Field(default=None, description="The gate's evidence (gate.json).")
