"""The gate's records, in the attempt folder of the apply they judge:

    candidate.json   the candidate version the apply made (`Candidate`): written when the applier's edits
                     are committed, before the gate; rewritten when a rebase makes a new candidate whose
                     gate must run again
    gate.json        the gate's evidence (`GateRecord`): the evaluation, each item's verdict, the cases
                     the candidate broke, the rule's figures and the verdict; written once the gate ended

and what the apply's record (`apply.json`) keeps of the gate (service.core.models.records.GateSummary).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.records import ApplyOutput, ApplyRecord, GateSummary, GateVerdict, Usage, new_seal


class Candidate(BaseModel):
    """`candidate.json`: a commit that is not the current version yet."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(pattern=r"^[0-9a-f]{40}$", description="The candidate commit.")
    base: str = Field(pattern=r"^[0-9a-f]{40}$", description="The version it was made on (its parent).")
    made_from: str | None = Field(
        default=None, description="The candidate it re-applies, when a rebase made it (its gate runs again)."
    )
    output: ApplyOutput
    fence: int = Field(description="The improvements lock's token under which the applier ran.")
    duration_ms: int = Field(default=0, ge=0, description="The applier's time.")
    feedback_seal: str | None = Field(default=None, description="The seal of the feedback applied.")
    at: datetime

    def record(self, version: str | None, gate: GateSummary) -> ApplyRecord:
        """The apply's record once its gate has spoken: `version` published (None: rejected)."""
        return ApplyRecord(
            base_version=self.base,
            version=version,
            output=self.output,
            fence=self.fence,
            duration_ms=self.duration_ms,
            feedback_seal=self.feedback_seal,
            seal=new_seal(),
            gate=gate,
        )


class GateItem(BaseModel):
    """One item of the gate's evaluation, as the rule read it."""

    model_config = ConfigDict(extra="forbid")

    case: str
    repeat: int
    baseline: Literal["pass", "fail"] | None = Field(
        description="How the case did before: `pass` for a case that passed, the base version's grade for a "
        "regression case (None: not graded there)."
    )
    verdict: Literal["pass", "fail"] | None = Field(description="The candidate's grade; None: not graded.")
    reason: str | None = None


class GateRecord(BaseModel):
    """`gate.json`: the evidence on which a candidate was published or rejected."""

    model_config = ConfigDict(extra="forbid")

    candidate: str
    base: str
    eval: str | None = Field(description="The gate's evaluation (None: the gate had no case to run).")
    verdict: GateVerdict
    why: str
    items: list[GateItem] = Field(default_factory=list)
    broken: list[str] = Field(
        default_factory=list, description="Cases that passed and fail on the candidate."
    )
    baseline_rate: float | None = None
    candidate_rate: float | None = None
    usage: Usage = Field(default_factory=Usage, description="What the gate's items spent.")
    ref: str | None = Field(default=None, description="The git ref a rejected candidate is kept under.")
    at: datetime
