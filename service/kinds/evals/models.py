"""An evaluation as the store keeps it, as its jobs carry it and as the fleet reports it.

An evaluation runs one system version of a tuning on a set of cases, each case `repeats` times:
each (case, repeat) is an *item*, one job on the fleet: the runner on that version with empty
memory, then the analyzer's grade; never an apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, StringConstraints

from service.core.models.case import Rev, Slug
from service.core.models.jobs import TuningJob
from service.core.models.records import Usage, utc_now
from service.kinds.evals.stats import Difference, Rate

EVAL_FUNCTION = "run_eval_item"
"""The arq function that runs one item."""

COMMIT_RE = re.compile(r"^[0-9a-f]{4,40}$")

VersionAsked = Annotated[str, StringConstraints(pattern=r"^(main|initial|[0-9a-f]{4,40})$")]
"""`main` (the tuning's current version), `initial` (the version imported) or a commit id (4 to 40
hex digits)."""

REPEATS_MAX = 1000
"""The most runs of each case one evaluation asks for."""

CasesSource = Literal["holdout", "train", "all", "folder", "gate"]
"""Where an evaluation's cases come from: a part of the tuning's split, or a folder of case files."""

Purpose = Literal["user", "holdout-initial", "holdout-final", "gate", "gate-base"]
"""Who asked: a user (`tunefleet eval`), the daemon measuring a split's held-out cases before
tuning (the imported version) and after (the final one), or an acceptance gate judging a candidate
(`gate`) and grading its base version on the regression cases (`gate-base`, service.kinds.evals.gate)."""

ItemState = Literal["graded", "failed", "cancelled"]
"""`graded`: the analyzer passed or failed the run; `failed`: infrastructure (three voids in a row,
an unreadable case, a lost lease too often), left out of the pass rate and counted apart;
`cancelled`: by `tunefleet eval cancel`."""

EvalStatus = Literal["queued", "running", "finished", "cancelled"]

CaseOutcome = Literal["pass", "fail", "flaky", "failed", "cancelled", "pending"]
"""A case's row: every graded repeat passed, none did, some did (`flaky`), or no repeat was graded
(`failed` for infrastructure, `cancelled`, or `pending`: items still to run)."""


class EvalCaseRef(BaseModel):
    """A case an evaluation runs: its id and the rev the evaluation keeps a copy of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Slug
    rev: Rev


HEAD_FIELDS = ("id", "tuning", "name", "purpose", "version", "version_asked", "created_at")
"""The fields of a spec that every view of its evaluation repeats (EvalSpec.head_fields)."""


class EvalSpec(BaseModel):
    """`EVAL.json`: what an evaluation runs, fixed when it is created."""

    model_config = ConfigDict(extra="forbid")

    id: Slug
    tuning: Slug
    name: str | None = Field(default=None, description="The name it was given (`--name`), if any.")
    purpose: Purpose = "user"
    version_asked: VersionAsked = Field(description="main, initial or a commit, as it was asked for.")
    version: str = Field(pattern=r"^[0-9a-f]{40}$", description="The commit evaluated.")
    source: CasesSource
    folder: Path | None = Field(default=None, description="The folder of cases, for source `folder`.")
    cases: list[EvalCaseRef] = Field(min_length=1)
    repeats: int = Field(ge=1, le=REPEATS_MAX)
    created_at: datetime

    @property
    def total(self) -> int:
        return len(self.cases) * self.repeats

    def items(self) -> Iterator[tuple[EvalCaseRef, int]]:
        """Every (case, repeat) of the evaluation, repeats numbered from 1."""
        for case in self.cases:
            for repeat in range(1, self.repeats + 1):
                yield case, repeat

    def head_fields(self) -> dict[str, Any]:
        """What names the evaluation wherever it is shown (EvalHead, EvalResults), by field."""
        return {name: getattr(self, name) for name in HEAD_FIELDS}

    def job(self, case: str, repeat: int) -> EvalItemJob:
        return EvalItemJob(tuning=self.tuning, eval=self.id, case=case, repeat=repeat, version=self.version)


class EvalItemJob(TuningJob):
    """The payload of one item's job: run and grade one case once on the evaluation's version (a job of
    its tuning: `tunefleet cancel` of the tuning, its holds and its budget reach it too)."""

    eval: Slug
    case: Slug
    repeat: int = Field(ge=1)
    version: str = Field(
        pattern=r"^[0-9a-f]{40}$",
        description="The evaluation's commit (as its spec holds it): an item reads no spec, whose case list "
        "grows with the evaluation.",
    )

    @property
    def job_id(self) -> str:
        """Unique per item across the fleet's queue."""
        return f"eval:{self.tuning}:{self.eval}:{self.case}:{self.repeat}"


class ItemResult(BaseModel):
    """`item.json`: how an item ended, written once by the fleet, after its grade (or its last void)."""

    model_config = ConfigDict(extra="forbid")

    case: Slug
    rev: int = Field(ge=1)
    repeat: int = Field(ge=1)
    state: ItemState
    verdict: Literal["pass", "fail"] | None = Field(default=None, description="Set when graded.")
    rubric: dict[str, float] = Field(default_factory=dict, description="Rubric item id -> score in 0..1.")
    reason: str | None = Field(default=None, description="Why it failed or was cancelled.")
    voids: NonNegativeInt = Field(default=0, description="Void runs set aside before this outcome.")
    usage: Usage = Field(default_factory=Usage, description="Every run and grade of the item, voids too.")
    version: str
    at: datetime = Field(default_factory=utc_now)
    worker: str | None = None


class CaseRow(BaseModel):
    """One case of an evaluation's results: its repeats and their outcomes."""

    model_config = ConfigDict(extra="forbid")

    case: str
    rev: int
    repeats: int
    graded: int = 0
    passed: int = 0
    failed: int = Field(default=0, description="Items that failed for infrastructure.")
    cancelled: int = 0
    pending: int = 0
    pass_fraction: float | None = Field(default=None, description="passed / graded; None if none graded.")
    outcome: CaseOutcome = "pending"


class InfraFailure(BaseModel):
    """An item that failed for infrastructure: no grade, left out of the pass rate."""

    model_config = ConfigDict(extra="forbid")

    case: str
    repeat: int
    reason: str | None


class EvalResults(BaseModel):
    """An evaluation's results, read from its items' folders."""

    model_config = ConfigDict(extra="forbid")

    id: str
    tuning: str
    name: str | None
    purpose: Purpose
    version: str
    version_asked: str
    source: CasesSource
    repeats: int
    created_at: datetime
    status: EvalStatus
    items: int = Field(description="(case, repeat) items in all.")
    done: int = Field(description="Items with an outcome.")
    graded: int
    passed: int
    failed: int = Field(description="Items failed for infrastructure (not in the pass rate).")
    cancelled: int
    voids: int = Field(description="Void runs set aside, over every item.")
    rate: Rate = Field(description="passed / graded with its 95 % Wilson interval.")
    rubric: dict[str, float] = Field(
        default_factory=dict, description="Rubric item id -> mean score over the graded items scoring it."
    )
    cases: list[CaseRow]
    flaky: list[str] = Field(default_factory=list, description="Cases that passed some repeats, not all.")
    usage: Usage = Field(default_factory=Usage)
    infra: list[InfraFailure] = Field(default_factory=list)


class Side(BaseModel):
    """One side of a comparison: the evaluation, its version, its pass rate and what it cost."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    rate: Rate
    tokens: int
    cost_usd: float


class Flip(BaseModel):
    """A case whose outcome differs between the two sides."""

    model_config = ConfigDict(extra="forbid")

    case: str
    before: float = Field(description="Its pass fraction on the first side.")
    after: float = Field(description="Its pass fraction on the second side.")
    direction: Literal["gained", "lost"] = Field(description="gained: fail -> pass; lost: pass -> fail.")


Chance = Literal["better", "worse", "within-chance", "no-pairs"]
"""What a comparison shows beyond chance (service.kinds.evals.compare.chance_of): B better or worse than A
(exact McNemar p < 0.05 and the difference's 95 % interval leaves 0 out), neither, or no pair at all."""


class Comparison(BaseModel):
    """`tunefleet eval compare A B`: B against A, case by case."""

    model_config = ConfigDict(extra="forbid")

    before: Side
    after: Side
    pairs: int = Field(description="Cases graded on both sides.")
    both: int = Field(description="Pairs that pass on both sides.")
    neither: int = Field(description="Pairs that pass on no side.")
    gained: int = Field(description="Pairs that fail before and pass after.")
    lost: int = Field(description="Pairs that pass before and fail after.")
    flips: list[Flip]
    mcnemar_p: NonNegativeFloat = Field(le=1, description="Exact McNemar p-value on the discordant pairs.")
    difference: Difference = Field(description="after - before of the paired pass rates, with its interval.")
    unpaired: list[str] = Field(default_factory=list, description="Cases graded on one side only.")
    chance: Chance = Field(default="within-chance", description="Whether the difference is beyond chance.")


class EvalHead(BaseModel):
    """A value of `tf:evals`: what status shows of an evaluation besides its counters."""

    model_config = ConfigDict(extra="forbid")

    id: str
    tuning: str
    name: str | None = None
    purpose: Purpose = "user"
    version: str
    version_asked: str
    items: int
    created_at: datetime

    @classmethod
    def of(cls, spec: EvalSpec) -> EvalHead:
        return cls(**spec.head_fields(), items=spec.total)


class EvalProgress(BaseModel):
    """An evaluation as status shows it, from the live counters (no walk of its folders)."""

    model_config = ConfigDict(extra="forbid")

    head: EvalHead
    passed: int = 0
    failed_grade: int = Field(default=0, description="Items graded fail.")
    failed: int = Field(default=0, description="Items failed for infrastructure.")
    cancelled: int = 0
    voids: int = 0
    rate: Rate
    status: EvalStatus

    @property
    def done(self) -> int:
        return self.passed + self.failed_grade + self.failed + self.cancelled
