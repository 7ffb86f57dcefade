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

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from service.core.models.acceptance import GateRule
from service.core.models.records import (
    ApplyOutput,
    ApplyRecord,
    GateSummary,
    GateVerdict,
    Usage,
    new_seal,
    utc_now,
)


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
    duration_ms: NonNegativeInt = Field(default=0, description="The applier's time.")
    feedback_seal: str | None = Field(default=None, description="The seal of the feedback applied.")
    at: datetime = Field(default_factory=utc_now)

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
        description="The same repeat's grade on the candidate's base version (None: not graded there)."
    )
    verdict: Literal["pass", "fail"] | None = Field(description="The candidate's grade; None: not graded.")
    reason: str | None = None


Decision = Literal["passed", "rejected", "open"]
"""The test rule's answer at a look: `open` while another round may change it."""


class TestOutcome(BaseModel):
    """The test's answer at one look (gate.json keeps the last)."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    look: int = Field(ge=1, description="Looks taken so far (rounds that added graded pairs).")
    pairs: NonNegativeInt
    lost: NonNegativeInt
    gained: NonNegativeInt
    difference: float = Field(description="The mean paired difference: candidate minus base pass rate.")
    statistic: float = Field(description="z = (difference + min_effect) / se.")
    bound: float = Field(description="The look's bound: z at or above it publishes.")
    futility: float = Field(
        default=-12.0,
        description="The look's lower bound: z at or below it rejects (at the last look, `bound`: anything "
        "below it rejects).",
    )
    lower: float = Field(
        description="The difference's repeated lower confidence bound, difference - bound * se (the bound "
        "on Student's t scale): at or above -min_effect exactly when the candidate passes."
    )
    fraction: float = Field(description="Pairs run over the pairs the design planned.")
    planned_pairs: int = Field(
        default=0,
        ge=0,
        description="The pairs the design needs to bound both errors (from alpha, beta, min_effect and the "
        "base's pass rate).",
    )
    stopped_early: bool = Field(description="Decided before the last round the gate could run.")

    def line(self, min_effect: float) -> str:
        """One line for gate.json's `why` and the events' detail."""
        verb = {"passed": "passed", "rejected": "rejected", "open": "undecided"}[self.decision]
        early = ", stopped early" if self.stopped_early else ""
        return (
            f"test {verb} at look {self.look}{early}: difference {self.difference:+.3f} over {self.pairs} "
            f"pairs ({self.lost} lost, {self.gained} gained), lower bound {self.lower:+.3f} vs "
            f"-{min_effect:g}, z {self.statistic:.2f} vs [{self.futility:.2f}, {self.bound:.2f}], "
            f"{self.pairs} of {self.planned_pairs} planned pairs"
        )


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
    rule: GateRule = Field(default="strict", description="The rule that judged (GateConfig.rule).")
    test: TestOutcome | None = Field(default=None, description="Rule test: the test's last look.")
    rounds: NonNegativeInt = Field(default=1, description="Rounds of runs the gate ran.")
    runs: NonNegativeInt = Field(
        default=0,
        description="Graded runs the gate read, on the candidate and on the base (the base's are shared "
        "with the other gates on that base).",
    )
    usage: Usage = Field(default_factory=Usage, description="What the gate's items spent.")
    ref: str | None = Field(default=None, description="The git ref a rejected candidate is kept under.")
    at: datetime = Field(default_factory=utc_now)
