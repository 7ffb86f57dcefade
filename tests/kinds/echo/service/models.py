"""The echo kind's payload and records."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.case import Slug
from service.core.models.jobs import TuningJob

ECHO_FUNCTION = "run_echo"
KIND_NAME = "echo"

EchoState = Literal["completed", "failed", "cancelled"]


class EchoJob(TuningJob):
    """Run one echo job of a tuning: its events go to the tuning's stream and counters, its cancel is
    the tuning's."""

    echo: Slug

    @property
    def job_id(self) -> str:
        return f"echo:{self.tuning}:{self.echo}"


class EchoSpec(BaseModel):
    """What the job was asked to do: `steps` steps, in order."""

    model_config = ConfigDict(extra="forbid")

    tuning: Slug
    echo: Slug
    steps: int = Field(ge=1, le=100)


class StepDone(BaseModel):
    """One finished step, written under the lease of the worker that ran it."""

    model_config = ConfigDict(extra="forbid")

    step: int
    worker: str
    lease: int


class EchoResult(BaseModel):
    """How the job ended; written last, so a job with one is never run again."""

    model_config = ConfigDict(extra="forbid")

    state: EchoState
    reason: str = ""
    steps_done: int
    at: datetime
