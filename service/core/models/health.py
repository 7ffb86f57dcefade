"""The bodies of `/healthz` and `/readyz`, served by workers and the daemon alike."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Liveness(BaseModel):
    """`/healthz`: the process is alive and its loop turns (200), or its loop has stalled (503)."""

    alive: bool
    process: Literal["worker", "daemon"]
    last_turn_s: float = Field(description="Seconds since the process's loop last turned.")
    stale_after_s: float = Field(description="How old the last turn may be before the process is not alive.")


class Readiness(BaseModel):
    """`/readyz`: Redis answers PING and the store folder is writable (200), or why not (503)."""

    ready: bool
    process: Literal["worker", "daemon"]
    redis: Literal["ok", "unavailable"] = Field(
        description="unavailable: Redis does not answer, or is full (at maxmemory under noeviction)."
    )
    store: Literal["ok", "unwritable"]
    breaker: Literal["open", "closed", "unknown"] = Field(
        description="The fleet's sandbox breaker (reported, not a reason to be unready); unknown when "
        "Redis does not answer."
    )
    reasons: list[str] = Field(default_factory=list, description="Why the process is not ready.")
