"""Events: one per step and per change of state, kept in the store and streamed through Redis."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.records import Phase, StepName


class Event(BaseModel):
    """One thing that happened in a tuning; `kind` is a snake_case name."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    tuning: str
    case: str | None = None
    goal: str | None = Field(default=None, description="The goal of a goal's event (its tuning may be '').")
    rev: int | None = None
    phase: Phase | None = None
    attempt: int | None = None
    step: StepName | None = None
    worker: str | None = None
    detail: str | None = None
    duration_ms: int | None = None
    tokens: int | None = None
    unmeasured_tokens: int | None = Field(
        default=None, description="Of `tokens`, those only the agent counted (usage source 'agent')."
    )
    estimated_tokens: int | None = Field(
        default=None, description="Of `tokens`, those the fleet's LLM adapter estimated (no usage given)."
    )
    cost_usd: float | None = None
    data: dict[str, Any] = Field(default_factory=dict)
