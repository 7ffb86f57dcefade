"""What the watch shows, read from Redis in a few round trips: fleet status, the steps under way,
the improvements locks and the latest events."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.asyncio import Redis

from service.client.queries import fleet_status
from service.core import keys
from service.core.models.events import Event, parse_event
from service.core.models.status import WAIT_WORDS, FleetStatus, LockHolder, RunningCase


class RunningStep(RunningCase):
    """One case under way, at the step it is running now: its `tf:running` note with the tuning and the
    job id it was found under."""

    model_config = ConfigDict(frozen=True)

    tuning: str
    job_id: str

    @property
    def state(self) -> str:
        """The step it is at, or what it waits for (`waiting for the lock`)."""
        return WAIT_WORDS[self.waiting] if self.waiting is not None else self.step

    def same_step(self, other: RunningStep) -> bool:
        """Whether both name the same step of the same try of the same job."""
        mine = (self.tuning, self.job_id, self.phase, self.attempt, self.step)
        return mine == (other.tuning, other.job_id, other.phase, other.attempt, other.step)


class LockState(BaseModel):
    """A tuning's improvements lock: the fencing token holding it (None: free), the holder's case and
    worker (when known) and applies waiting."""

    tuning: str
    holder_token: int | None = None
    holder: LockHolder | None = None
    pending: int = 0


class WatchSnapshot(BaseModel):
    """Everything one frame of the watch shows."""

    taken_at: datetime
    status: FleetStatus
    running: list[RunningStep] = Field(default_factory=list, description="By tuning, then case.")
    locks: list[LockState] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list, description="Oldest first.")
    unreadable: int = Field(default=0, description="Running entries or events that did not parse.")


async def take_snapshot(redis: Redis, queue: str, *, event_count: int) -> WatchSnapshot:
    """The fleet now: two round trips for the status (locks included), one for the running cases and
    events."""
    status = await fleet_status(redis, queue)
    names = [t.name for t in status.tunings]
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(keys.running(name))
        pipe.xrevrange(keys.events(), count=max(0, event_count))
        replies = await pipe.execute()
    running: list[RunningStep] = []
    unreadable = 0
    for name, running_raw in zip(names, replies[:-1], strict=True):
        steps, bad = _running_steps(name, running_raw)
        running += steps
        unreadable += bad
    locks = [
        LockState(tuning=t.name, holder_token=t.lock.fence, holder=t.lock.holder, pending=t.lock.pending)
        for t in status.tunings
    ]
    events, bad = _events(replies[-1] if event_count > 0 else [])
    return WatchSnapshot(
        taken_at=datetime.now(UTC),
        status=status,
        running=sorted(running, key=lambda r: (r.tuning, r.case, r.rev, r.job_id)),
        locks=locks,
        events=events,
        unreadable=unreadable + bad,
    )


def _running_steps(tuning: str, raw: dict[bytes, bytes]) -> tuple[list[RunningStep], int]:
    steps: list[RunningStep] = []
    bad = 0
    for job_id, value in raw.items():
        entry = RunningCase.parse(value)
        if entry is None:
            bad += 1
            continue
        steps.append(RunningStep(tuning=tuning, job_id=job_id.decode(), **entry.model_dump()))
    return steps, bad


def _events(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> tuple[list[Event], int]:
    """Stream entries (newest first, as XREVRANGE gives them) as events, oldest first."""
    events: list[Event] = []
    bad = 0
    for _, fields in reversed(entries):
        raw = fields.get(b"event")
        if raw is None:
            bad += 1
            continue
        try:
            events.append(parse_event(raw))
        except ValidationError:
            bad += 1
    return events, bad
