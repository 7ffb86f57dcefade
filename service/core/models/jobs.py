"""Job payloads that travel through the queue (serialized as JSON, never pickle)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core import keys
from service.core.models.case import Slug

CASE_FUNCTION = "run_case"
GOAL_FUNCTION = "run_goal"


class LeasedJob(BaseModel, ABC):
    """The payload of a job a worker runs under a lease (workers.envelope), whatever its kind."""

    model_config = ConfigDict(extra="forbid")

    @property
    @abstractmethod
    def job_id(self) -> str:
        """The queue's id of the job: one per job, so that duplicates collapse."""

    @property
    @abstractmethod
    def scope(self) -> str:
        """Where the job's cancel is set (`tf:cancelled:<scope>`): its tuning, or its kind's own scope."""


class TuningJob(LeasedJob):
    """A job of one tuning (a case, an evaluation item): its tuning's cancel set, holds and budget reach
    it, so its cancel is set in its tuning's scope."""

    tuning: Slug

    @property
    def scope(self) -> str:
        return self.tuning


class CaseJob(TuningJob):
    """Run one case of a tuning to its end."""

    case: Slug
    rev: int

    @property
    def job_id(self) -> str:
        return job_id_for(self.tuning, self.case, self.rev)


class GoalJob(LeasedJob):
    """Pursue one goal (service.kinds.goals.models) to its end."""

    goal: Slug

    @property
    def job_id(self) -> str:
        return f"goal:{self.goal}"

    @property
    def scope(self) -> str:
        return keys.GOALS_SCOPE


JobState = Literal["completed", "difficult", "incomplete", "graded", "failed", "cancelled"]
"""How a job ends: a case `completed`, `difficult`, `failed` or `cancelled`; a goal `completed`,
`incomplete`, `failed` or `cancelled`; an evaluation item `graded`, `failed` or `cancelled`."""


class JobResult(BaseModel):
    """arq's result of a leased job, whatever its kind: how it ended on the worker that ended it, or
    the lease it lost (then another worker ends it, and nothing here was written)."""

    model_config = ConfigDict(extra="forbid")

    state: JobState | None = None
    reason: str | None = None
    steps: int | None = Field(default=None, ge=0, description="The steps the job recorded (cases).")
    lease_lost: int | None = Field(default=None, description="The token of the lease that was lost.")


def job_id_for(tuning: str, case: str, rev: int) -> str:
    """The queue's id of a case job: unique per tuning, case and rev, so duplicates collapse."""
    return f"case:{tuning}:{case}:{rev}"


def dump_job(data: dict[str, Any]) -> bytes:
    """arq's job and result serializer: JSON, so no one who can write to Redis can run code."""
    return json.dumps(data, default=str, separators=(",", ":")).encode()


def load_job(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("a job must be a JSON object")
    return value
