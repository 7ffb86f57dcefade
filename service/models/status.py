"""What the client returns: fleet status, result rows, one case's detail, a submission report."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from service.models.records import ApplyRecord, Feedback, Phase, RunRecord


class MirrorState(BaseModel):
    """`tf:mirror:<tuning>`: how the daemon's pushes of a tuning's current version to its remote went."""

    remote: str = Field(description="The tuning's remote, credentials masked.")
    branch: str
    version: str | None = Field(default=None, description="The last version pushed there.")
    pushed_at: datetime | None = None
    error: str | None = Field(
        default=None, description="Why the latest push failed; unset once one succeeds."
    )
    failing_since: datetime | None = Field(default=None, description="The first failure since the last push.")
    at: datetime = Field(description="When the latest push was tried.")
    attempts: int = Field(default=0, ge=0, description="Failed pushes in a row.")

    def to_hash(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump(mode="json", exclude_none=True).items()}

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> MirrorState | None:
        """The state in a Redis hash; None when there is none (or it is not one: it is pushed again)."""
        if not raw:
            return None
        try:
            return cls.model_validate({k.decode(): v.decode() for k, v in raw.items()})
        except (ValidationError, UnicodeDecodeError):
            return None


class Hold(BaseModel):
    """A field of `tf:held`: why no run of a tuning starts (its cases wait, nothing is failed) until
    `tunefleet resume TUNING`, or a registration whose budget no longer holds it."""

    kind: Literal["budget", "auth"] = Field(
        description="budget: the tuning spent its budget; auth: a key was refused."
    )
    reason: str
    at: datetime

    @classmethod
    def parse(cls, raw: bytes | str) -> Hold | None:
        """The hold in a hash field; None when it is not one (a hand-written value holds nothing)."""
        try:
            return cls.model_validate_json(raw)
        except ValidationError:
            return None


class TuningStatus(BaseModel):
    name: str
    submitted: int = 0
    waiting: int = 0
    running: int = 0
    running_by_step: dict[str, int] = Field(default_factory=dict)
    completed: int = 0
    difficult: int = 0
    failed: int = 0
    cancelled: int = 0
    runs_by_outcome: dict[str, int] = Field(default_factory=dict)
    tokens: int = 0
    unmeasured_tokens: int = Field(
        default=0, description="Of `tokens`, those nobody measured: the agents' own word (source 'agent')."
    )
    cost_usd: float = 0.0
    version: str | None = None
    mirror: MirrorState | None = Field(
        default=None, description="Pushes to the tuning's remote, if it has one."
    )
    held: Hold | None = Field(default=None, description="Set while no run of the tuning starts.")


class WorkerStatus(BaseModel):
    name: str
    slots: int
    cases: list[str]
    last_seen_ms: int


class FleetStatus(BaseModel):
    queue_depth: int = Field(description="Jobs in the queue that no worker runs now.")
    in_progress: int
    breaker: dict[str, str]
    paused: bool
    workers: list[WorkerStatus]
    tunings: list[TuningStatus]


class ResultRow(BaseModel):
    case: str
    rev: int
    state: str
    reason: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    expected: str | None = Field(default=None, description="The outcome a demo case declares.")
    met: bool | None = None
    held: str | None = Field(
        default=None, description="Unfinished, and waiting: the reason its tuning is held."
    )


class AttemptView(BaseModel):
    phase: Phase
    attempt: int
    folder: str
    run: RunRecord | None = None
    feedback: Feedback | None = None
    apply: ApplyRecord | None = None
    analysis: str | None = None


class CaseDetail(BaseModel):
    tuning: str
    case: str
    rev: int
    result: dict[str, Any] | None
    attempts: list[AttemptView]


class Refusal(BaseModel):
    file: str
    error: str


class SubmitReport(BaseModel):
    accepted: list[str] = Field(default_factory=list, description="case@rev enqueued now.")
    duplicates: list[str] = Field(default_factory=list, description="case@rev already queued or done.")
    refused: list[Refusal] = Field(default_factory=list)
    at: datetime | None = None
