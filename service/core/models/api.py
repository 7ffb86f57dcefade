"""The bodies of the HTTP API (service.api.app): queries it accepts and what it answers.

Every request and response that crosses HTTP is one of these models (or a model of
service.core.models.status / service.core.models.case), so the OpenAPI document is generated from them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, RootModel, field_validator

from service.core.models.case import Case, Slug
from service.core.models.events import Event
from service.core.models.status import FleetStatus, LockHolder, ResultRow

CaseFilter = Literal["completed", "difficult", "failed", "cancelled", "unfinished"]

STREAM_ID_PATTERN = r"^[0-9]+(-[0-9]+)?$"
"""A Redis stream id, `<ms>` or `<ms>-<seq>`: ASCII digits (`\\d` would take any script's digits)."""
STREAM_PART_MAX = 2**64 - 1
"""Each part of a stream id is an unsigned 64-bit integer; Redis refuses a larger one."""


class LockState(BaseModel):
    """A tuning's improvements lock as Redis holds it now."""

    tuning: str
    held: bool = Field(description="An apply holds the lock.")
    fence: int | None = Field(default=None, description="The fencing token of the holder.")
    holder: LockHolder | None = Field(default=None, description="The holder's case and worker.")
    pending: NonNegativeInt = Field(default=0, description="Applies waiting for or holding the lock.")


class StatusView(FleetStatus):
    """The fleet status plus the improvements locks and when it was read."""

    locks: list[LockState] = Field(default_factory=list)
    sampled_at: datetime


class TuningInfo(BaseModel):
    """A registered tuning: its limits and the kinds of its three adapters."""

    name: str
    tries: int
    mem_tries: int
    max_voids: int
    runner: str = Field(description="`demo` or `command`.")
    analyzer: str
    applier: str


class TuningList(BaseModel):
    tunings: list[TuningInfo]


class CasesQuery(BaseModel):
    """Query of `GET /api/tunings/{tuning}/cases`."""

    model_config = ConfigDict(extra="forbid")

    state: CaseFilter | None = Field(default=None, description="Only cases in this state.")
    offset: NonNegativeInt = Field(default=0, description="Skip this many rows (of those the filter keeps).")
    limit: int = Field(default=1000, ge=1, le=10_000, description="At most this many rows.")


class CaseRows(BaseModel):
    """A page of the result rows of a tuning's cases (the newest rev of each, ordered by case id), maybe
    filtered by state."""

    tuning: str
    state: CaseFilter | None
    cases: list[ResultRow]
    total: int = Field(description="Rows the filter keeps, on every page.")
    offset: int
    next_offset: int | None = Field(description="The `offset` of the next page; None on the last page.")


class EventsQuery(BaseModel):
    """Query of `GET /api/events`."""

    model_config = ConfigDict(extra="forbid")

    after: str | None = Field(
        default=None,
        pattern=STREAM_ID_PATTERN,
        description="A stream id: only events after it, oldest first. Without it: the latest events.",
    )
    limit: int = Field(default=100, ge=1, le=1000, description="At most this many events.")

    @field_validator("after")
    @classmethod
    def _a_stream_id(cls, value: str | None) -> str | None:
        """Refused here (422), not by Redis (which the API would report as unavailable, 503)."""
        if value is None:
            return value
        parts = [int(part) for part in value.split("-")]
        if any(part > STREAM_PART_MAX for part in parts):
            raise ValueError(f"each part of a stream id is at most {STREAM_PART_MAX}")
        if parts == [STREAM_PART_MAX, STREAM_PART_MAX]:
            raise ValueError("no event comes after the last possible stream id")
        return value


class StreamEvent(BaseModel):
    """One entry of the Redis event stream."""

    id: str = Field(description="The stream id; pass it as `after` to page on.")
    event: Event


class EventsPage(BaseModel):
    events: list[StreamEvent]
    last_id: str | None = Field(description="The id to pass as `after` next (None: the stream is empty).")


class SubmitResult(BaseModel):
    """The answer to a case submission."""

    tuning: str
    case: Slug
    rev: int
    enqueued: bool = Field(description="False when the same case and rev is already queued, running or done.")


class FieldError(BaseModel):
    field: str = Field(description="Dotted path of the offending field, `(body)` for the whole body.")
    message: str


class ErrorBody(BaseModel):
    """Every error answer: what went wrong, and for invalid input, which fields."""

    error: str
    fields: list[FieldError] = Field(default_factory=list)


class CaseBatch(RootModel[list[Case]]):
    """A batch submission: a JSON array of cases, all valid or none submitted."""


class BatchItem(BaseModel):
    """What became of one case of an accepted batch."""

    index: int
    case: Slug
    rev: int
    enqueued: bool = Field(description="False when the same case and rev is already queued, running or done.")


class BatchResult(BaseModel):
    """The answer to an accepted batch, one item per case in the order sent."""

    tuning: str
    enqueued: int
    already_known: int
    cases: list[BatchItem]


class ItemErrors(BaseModel):
    """Why one case of a refused batch is invalid."""

    index: int
    case: str | None = Field(description="The item's `id`, when it has a readable one.")
    fields: list[FieldError]


class BatchRefused(BaseModel):
    """The answer to a refused batch: nothing was submitted; every invalid item is named."""

    error: str
    items: list[ItemErrors]


class PauseState(BaseModel):
    """The fleet's pause after a pause or resume."""

    paused: bool


class Released(BaseModel):
    """The answer to resuming a tuning: whether it was held."""

    tuning: str
    released: bool


class Cancelled(BaseModel):
    """The answer to a cancel: the job ids of the cases cancelled (running ones end within a poll)."""

    tuning: str
    case: str | None = Field(description="The case cancelled; None when every unfinished case was.")
    cancelled: list[str]
