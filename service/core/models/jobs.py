"""Job payloads that travel through the queue (serialized as JSON, never pickle)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from service.core.models.case import Slug

CASE_FUNCTION = "run_case"
GOAL_FUNCTION = "run_goal"


class CaseJob(BaseModel):
    """Run one case of a tuning to its end."""

    model_config = ConfigDict(extra="forbid")

    tuning: Slug
    case: Slug
    rev: int

    @property
    def job_id(self) -> str:
        return job_id_for(self.tuning, self.case, self.rev)


class GoalJob(BaseModel):
    """Pursue one goal (service.core.models.goal) to its end."""

    model_config = ConfigDict(extra="forbid")

    goal: Slug

    @property
    def job_id(self) -> str:
        return f"goal:{self.goal}"


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
