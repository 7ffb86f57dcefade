"""The context every leased job carries on this worker, whatever its kind: the lease and its fenced
writes, the fleet's controls, breaker and event sink, the gate a step start waits at, and the meter of
the agent call under way. A kind's run context (workers.kinds.cases.run.CaseRun,
workers.kinds.goals.run.GoalRun) adds
its own subject and answers the few questions the envelope (workers.envelope) asks on the way out.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import structlog
from pydantic import BaseModel

from service.core import keys
from service.core.io.files import model_bytes, read_model, write_atomic, write_model
from service.core.models.events import EventKind
from service.core.models.records import COST_SCALE, Usage
from service.core.models.status import Hold, WaitCause
from service.core.models.tuning import Budget
from workers.lease import JobLease
from workers.meter import CURRENT, StepMeter
from workers.runtime import WorkerRuntime
from workers.slots import hurry
from workers.tuning import TuningRuntime

M = TypeVar("M", bound=BaseModel)

Announce = Callable[[WaitCause, Hold | None], Awaitable[None]]
"""How a kind tells that a step start waits (and for what): its event, its live state."""


class JobRun(ABC):
    """One job this worker runs under one lease."""

    requeued: ClassVar[EventKind]
    """Its event when a stopping worker gives it back to the queue."""

    def __init__(
        self, runtime: WorkerRuntime, lease: JobLease, tuning: TuningRuntime | None, context: dict[str, Any]
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.sink = runtime.sink
        self.breaker_watch = runtime.breaker_watch
        self.controls = runtime.controls
        self.worker = runtime.name
        self.lease = lease
        self.tuning = tuning
        """The tuning the job runs on (its holds, budget and counters), if any."""
        self.log = structlog.get_logger().bind(worker=self.worker, **context)
        self._landing: asyncio.Future[None] | None = None
        """The last write `write_behind` started, which lands after the ones before it."""
        self._behind: dict[Path, BaseModel] = {}
        """The records `write_behind` was handed that have not landed yet, by path (`record`)."""
        self._turn: asyncio.Future[None] | None = None
        """The turn the write landing next waits for (workers.slots): its wait ends early once the job
        waits for it."""
        self._hurried = False
        """Whether the writes under way land at once (the job waits for them, or starts no agent)."""

    @property
    def job_id(self) -> str:
        return self.lease.job_id

    @property
    def cancel_requested(self) -> bool:
        """Whether the store says the job was cancelled (a cancel that outlives Redis)."""
        return False

    @property
    def step_under_way(self) -> str | None:
        """The step a cancel stops, named in the reason (None: the reason names none)."""
        return None

    def work_name(self, step: str) -> str:
        """This lease's private folder name for a step, so a stale holder's agents never collide."""
        return f"{step}-{self.lease.token}"

    async def write(self, path: Path, model: BaseModel, *also: tuple[Path, bytes]) -> None:
        """A fenced, durable write (with `also` files, written first and not flushed): refused
        (LeaseLost) once the lease has moved on. It lands after every write `write_behind` started. A job
        on a tuning has it flushed to disk with the other jobs' writes of the moment, off the event loop
        (service.core.io.disk_batch); one without (a goal with no tuning) writes it on the event loop."""
        await self.landed()
        await self._write_now(path, model, *also)

    async def _write_now(self, path: Path, model: BaseModel, *also: tuple[Path, bytes]) -> None:
        await self.lease.check()
        if self.tuning is None:
            for other, data in also:
                write_atomic(other, data, durable=False)
            write_model(path, model)
        else:
            await self.tuning.disk.write(path, model_bytes(model), also)

    def write_behind(
        self, path: Path, model: BaseModel, *also: tuple[Path, bytes], then: Callable[[], None]
    ) -> None:
        """`write`, started and not waited for: a step's record lands (and `then` announces it) while
        the job's next agents start. The writes land in the order they were started; the job waits for
        them (`landed`) before it records the step after the next one (a try's analysis, when its run
        returns), moves its folders, writes anything else or leaves the worker, so a record that cannot
        land (its lease lost, say) stops the job there, before anything that followed it is recorded. A
        record read meanwhile is read as it was handed over (`record`). What this changes: a crash
        before the record lands runs its step again, as a crash at its write always did, and the next
        agents may have started meanwhile (their work is lost with the record)."""
        before = self._landing
        if before is None:
            self._hurried = False
        self._behind[path] = model

        async def land() -> None:
            if before is not None:
                await before
            if not self._hurried:
                self._turn = self.runtime.slots.turn()
                await self._turn  # the agents about to start go first
            await self._write_now(path, model, *also)
            if self._behind.get(path) is model:
                del self._behind[path]
            then()

        self._landing = asyncio.ensure_future(land())
        self.runtime.slots.record_landing(self._landing)

    def hurry_landing(self) -> None:
        """Let the writes `write_behind` started land without giving way to starts any more (not waited
        for: `landed` waits)."""
        self._hurried = True
        if self._turn is not None:
            hurry(self._turn)

    def record(self, path: Path, model: type[M]) -> M | None:
        """The job's record at `path`: as it was handed to `write_behind` while that write has not landed,
        else as the file has it (None: no such record)."""
        behind = self._behind.get(path)
        if isinstance(behind, model):
            return behind
        return read_model(path, model)

    async def landed(self) -> None:
        """Wait until every write `write_behind` started has landed; the first that failed raises its
        error here (once: the writes after it were not made)."""
        landing = self._landing
        if landing is None:
            return
        self.hurry_landing()
        try:
            await asyncio.shield(landing)  # a cancelled wait leaves the record landing
        finally:
            if landing.done() and self._landing is landing:
                self._landing = None

    def abandon_writes(self) -> None:
        """The job leaves the worker on a way out that writes nothing: a record still landing is let be
        (its lease check refuses it if the lease is gone), its error no longer reported."""
        landing, self._landing = self._landing, None
        if landing is not None:
            landing.add_done_callback(lambda done: done.cancelled() or done.exception())

    @abstractmethod
    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """Send an event about this job through the fleet's sink."""

    async def events_sent(self) -> None:
        """Wait until the job's events queued without waiting are in Redis (a kind that queues none:
        at once)."""
        return None

    def abandon_events(self) -> None:
        """The job is leaving this worker: nobody will wait for the events it queued without waiting any
        more (they are still sent; an error of theirs is not reported as never retrieved)."""
        return None

    async def let_go(self, kind: EventKind, detail: str, data: dict[str, Any] | None = None) -> None:
        """The job went back to the queue (its lease is given up): say so, with `kind`'s event."""
        await self.emit(kind, detail=detail, data=data or {})

    @contextmanager
    def metered(self, where: dict[str, Any]) -> Iterator[StepMeter]:
        """Meter one agent call: if it never returns (a deadline, a cancel, a stop), what the fleet's
        adapters measured it spending is kept with `unfinished_spend` (at once, with no await: safe while
        the call is being cancelled) and recorded for good by `settle_spend`."""
        meter = StepMeter()
        self.runtime.slots.starting(self.job_id, False)
        token = CURRENT.set(meter)
        try:
            yield meter
        except BaseException:
            spent = meter.usage()
            if spent.tokens or spent.cost_usd:
                self.unfinished_spend(spent, where)
            raise
        finally:
            CURRENT.reset(token)
            self.runtime.slots.starting(self.job_id, True)  # until its next agent, if any, starts

    @abstractmethod
    def unfinished_spend(self, spent: Usage, where: dict[str, Any]) -> None:
        """Keep what an agent call spent that never returned (no await)."""

    def note_handback(self, count: int, error: str) -> None:
        """The job is handed back for a provider outage (the `count`th time in a row): a kind that keeps
        its hand-backs writes it down here, with what `unfinished_spend` kept since the last settling
        (no await; before `settle_spend`). Others keep the count in Redis only."""
        return None

    @abstractmethod
    async def settle_spend(self) -> None:
        """Record for good what `unfinished_spend` kept (the envelope calls it on every way out)."""

    async def wait_runnable(self, announce: Announce) -> None:
        """Hold a step start while the fleet is paused, the job's tuning is held (its budget spent, a key
        refused) or the sandbox breaker is open, announcing each wait."""
        told_hold = False
        while True:
            if self.controls.runs.is_shut:
                await announce("resume", None)
                await self.controls.runs.wait_open()
                told_hold = False
            hold = await tuning_hold(self, self.tuning) if self.tuning is not None else None
            if hold is None or self.tuning is None:
                break
            if not told_hold:
                await announce("hold", hold)
                told_hold = True
            await self.controls.wait_released(self.tuning.name)
        if self.breaker_watch.runs.is_shut:
            await announce("sandbox", None)
            await self.breaker_watch.runs.wait_open()


async def tuning_hold(run: JobRun, tuning: TuningRuntime) -> Hold | None:
    """The hold of the tuning a job runs on, set here first if its spend (the live counters) is at or
    past its budget and `tunefleet resume TUNING` did not waive that budget."""
    held = run.controls.held(tuning.name)
    if held is not None:
        return held
    cached = tuning.config.budget
    if not cached.bounds_tuning:
        return None  # a tuning registered without one: no stat of its config at every step start
    budget = tuning.current_budget()
    if not budget.bounds_tuning:
        return None
    await run.landed()  # the spend of the job's last step is in the counters read below: its record
    await run.events_sent()  # landed, and the event that counts it sent
    async with run.sink.redis.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.stats(tuning.name), ["tokens", "cost_usd_micros"])
        pipe.hget(keys.budget_waived(), tuning.name)
        (tokens, micros), waived = await pipe.execute()
    reason = budget.tuning_over(int(tokens or 0), int(micros or 0) / COST_SCALE)
    if reason is None or Budget.parse(waived) == budget:
        return None
    if await run.controls.hold(tuning.name, "budget", reason):
        await run.emit(EventKind.TUNING_HELD, detail=reason, data={"kind": "budget"})
    return run.controls.held(tuning.name)
