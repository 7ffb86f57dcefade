"""A guard's rejection, kept in the attempt folder beside the gate's record (`guard.json`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from service.core.models.records import utc_now

GUARD_FILE = "guard.json"
GuardName = Literal["leak", "size", "collapse"]


class GuardRejection(BaseModel):
    """`guard.json`: the guard that rejected a candidate, why, and its evidence."""

    model_config = ConfigDict(extra="forbid")

    guard: GuardName
    candidate: str
    base: str
    why: str = Field(description="One line: what the guard found, with its figures.")
    case: str | None = Field(default=None, description="For `leak`: the case whose words were copied.")
    words: str | None = Field(default=None, description="For `leak`: the words in common, normalised.")
    tokens_before: NonNegativeInt = Field(default=0, description="The base version's tokens (cl100k_base).")
    tokens_after: NonNegativeInt = Field(default=0, description="The candidate's tokens (cl100k_base).")
    at: datetime = Field(default_factory=utc_now)
