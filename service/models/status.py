"""What the client returns: fleet status, result rows, one case's detail, a submission report."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from service.models.records import ApplyRecord, Feedback, Phase, RunRecord


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
    cost_usd: float = 0.0
    version: str | None = None


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
