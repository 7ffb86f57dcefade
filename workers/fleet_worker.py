"""The worker's scheduler: claim, run, finish. It shares arq's job format (service.core.io.arq_contact),
so arq's public client enqueues and reads tunefleet's jobs, and none of arq's `Worker`.

- **Claim** (workers.claim): every `poll_delay_s`, and at once when a slot frees (if the last claim
  filled every slot it asked for), a job lends its slot or an outage ends,
  one script takes this worker's fair share of the due jobs, resumed ones first, each for one lease.
- **Run**: the job's kind (workers.jobs, by the function name its record carries) in a task of its own,
  in the job envelope (`workers.envelope.run_job`: the runtime, the payload and the try, no arq `ctx`).
  It returns the job's result, raises `arq.Retry` to be run again later, or is cancelled (the worker
  stops, or the user cancelled it: the envelope tells).
  Leases, not a timeout, bound how long a dead worker holds a job (workers.lease).
- **Finish** (workers.finish): one script, fenced by the lease token, ends the job or puts it back.
  A finish that Redis does not answer is left to the lease: it lapses and the job is resumed.
- SIGTERM/SIGINT: stop claiming at once, cancel the running jobs (their agents get the grace period),
  let each give its job back to the queue, exit. With `burst`, exit once the queue is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from typing import Any

import structlog
from arq import Retry
from redis.exceptions import RedisError

from service.core.io.arq_contact import JobFormatError, JobRecord, TryRecord, read_job, result_record
from service.core.models.jobs import dump_job, load_job
from service.kinds.registry import slices
from workers.claim import Claimed, Claimer
from workers.envelope import run_job
from workers.finish import Finisher, Outcome
from workers.jobs import job_kinds
from workers.runtime import WorkerRuntime

log = structlog.get_logger()

KEEP_RESULT_S = 24 * 3600
DEFAULT_READ_LIMIT = 100
"""Queue entries one poll reads per band, at least (and 5 per slot: arq's default)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class FleetWorker:
    """One worker process's scheduler of leased jobs."""

    def __init__(self, runtime: WorkerRuntime, *, burst: bool = False) -> None:
        settings = runtime.settings
        self.runtime = runtime
        self.burst = burst
        self.kinds = job_kinds(slices(settings))
        """Every kind this worker runs, by the function name its jobs carry."""
        self.max_jobs = settings.concurrency
        read_limit = settings.queue_read_limit or max(5 * self.max_jobs, DEFAULT_READ_LIMIT)
        stale_ms = int((3 * settings.poll_delay_s + settings.outage_backoff_max_s) * 1000)
        self._claimer = Claimer(runtime.redis, settings.queue, runtime.name, read_limit, stale_ms)
        self._finisher = Finisher(runtime.batch, settings.queue, runtime.name, KEEP_RESULT_S * 1000)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        """Job id -> the task that runs it from its claim to its finish."""
        self.slots = runtime.slots
        """Held by each job from its claim until its function ends (a finish holds none); lent by a job
        while it waits on the fleet (workers.slots)."""
        self.job_tasks: dict[str, asyncio.Task[Any]] = {}
        """Job id -> the job function's task: cancelling it stops the job (its function says how)."""
        self.allow_pick_jobs = True
        self.jobs_complete = self.jobs_retried = self.jobs_failed = 0
        self.polled_at_s = time.monotonic()
        """When the poll loop last turned (monotonic): the worker's liveness (workers.health)."""
        self._poll_failures = 0
        self._wake = asyncio.Event()
        self._stopper: asyncio.Task[None] | None = None
        """Set on the first SIGTERM/SIGINT: lets the running jobs hand themselves back, then stops."""
        self._stopped = asyncio.Event()
        runtime.outage.on_answer(self._wake.set)
        self.slots.on_free = self._slot_freed
        self.slots.on_lend = self._wake.set
        self._more_due = True
        """Whether the last claim filled every slot it asked for, so that more jobs may be due: only
        then does a freed slot claim at once. After a claim that found fewer, a job that ends does not
        make one due (new ones come by enqueue, and the next timed poll takes them; so does a suspect
        that a job's end lets this worker take); otherwise a burst of job ends would each send a claim
        that finds nothing, just when the last steps' bookkeeping needs the loop (`bench slots`)."""

    async def run(self) -> None:
        """Poll and run jobs until stopped by a signal (or, with `burst`, until the queue is empty)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.handle_sig, signum)
        try:
            while not self._stopped.is_set():
                await self._poll()
                if self.burst and not self.tasks and await self._queue_empty():
                    break
                await self._pause()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            pending = list(self.tasks.values())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _slot_freed(self) -> None:
        if self._more_due or self.burst:  # in burst, the exit check is made at once
            self.slots.claim_due(self.allow_pick_jobs)
            self._wake.set()

    async def _poll(self) -> None:
        """Claim this worker's share of the due jobs while it takes jobs and has a free slot; a Redis
        outage is logged once (workers.outage) and the polls back off until it ends."""
        self._wake.clear()
        self.polled_at_s = time.monotonic()
        free = self.slots.free()
        if not self.allow_pick_jobs or free <= 0 or self.runtime.store_watch.claims.is_shut:
            self.slots.claim_due(False)
            return
        try:
            lease_ms = int(self.runtime.settings.lease_s * 1000)
            claimed = await self._claimer.claim(
                free, lease_ms, list(self.runtime.suspects.values()), self.tasks
            )
        except RedisError as exc:
            self.runtime.outage.failed("poll", exc)
            self._poll_failures += 1
            self._more_due = True
            self.slots.claim_due(False)
            return
        self.runtime.outage.answered()
        self._poll_failures = 0
        self._more_due = len(claimed) >= free
        for job in claimed:
            if job.level:
                self.runtime.suspects[job.job_id] = job.level
            task = asyncio.create_task(self._run(job))
            self.tasks[job.job_id] = task
            self.slots.hold(job.job_id)
            task.add_done_callback(functools.partial(self._ran, job.job_id))
        self.slots.claim_due(False)

    async def _pause(self) -> None:
        """Wait `poll_delay_s` (longer while Redis is away), or until a slot frees or an outage ends."""
        wait_s = self.runtime.outage.wait_s(self.runtime.settings.poll_delay_s, self._poll_failures)
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a stop's cancel that lands in the
        # same turn as a freed slot, and the worker would poll on for ever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._wake.wait()

    async def _queue_empty(self) -> bool:
        try:
            return int(await self.runtime.redis.zcard(self.runtime.settings.queue)) == 0
        except RedisError:
            return False

    def _free(self, job_id: str) -> None:
        """The job's slot is free (its function ended): the poll may fill it at once."""
        self.slots.release(job_id)

    def _ran(self, job_id: str, task: asyncio.Task[None]) -> None:
        self.tasks.pop(job_id, None)
        self.runtime.suspects.pop(job_id, None)
        self.slots.release(job_id)  # may wake the poll (`_slot_freed`; in burst, for the exit check)
        if not task.cancelled() and task.exception() is not None:
            log.error("job_run_crashed", job_id=job_id, error=repr(task.exception()))

    async def _run(self, claimed: Claimed) -> None:
        """Run one claimed job to its outcome, then finish it (the finish is not cancelled with the run)."""
        job_id = claimed.job_id
        start_ms = _now_ms()
        try:
            job = read_job(claimed.record, load_job)
            kind = self.kinds.get(job.function)
            if kind is None:
                raise JobFormatError(f"no job function is named {job.function!r}")
            if len(job.args) != 1 or not isinstance(job.args[0], dict) or job.kwargs:
                raise JobFormatError(
                    f"a {job.function} job's record holds one payload object, not {job.args!r}"
                )
        except JobFormatError as exc:
            log.error("job_unreadable", job_id=job_id, error=str(exc))
            self.jobs_failed += 1
            self._free(job_id)
            unknown = JobRecord("?", (), {}, None, 0)
            ending = TryRecord(False, str(exc), start_ms, _now_ms())
            await self._finish(job_id, self._ended(job_id, unknown, claimed.job_try, ending))
            return
        job_try = max(claimed.job_try, job.job_try or 0)
        task = asyncio.create_task(run_job(kind, self.runtime, job.args[0], job_try))
        self.job_tasks[job_id] = task
        try:
            result = await task
            outcome = self._ended(job_id, job, job_try, TryRecord(True, result, start_ms, _now_ms()))
            self.jobs_complete += 1
        except Retry as retry:
            outcome = Outcome(ended=False, defer_ms=retry.defer_score or 0)
            self.jobs_retried += 1
        except asyncio.CancelledError:
            self.jobs_retried += 1
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                await asyncio.shield(self._finish(job_id, Outcome(ended=False)))  # stopped past the grace
                raise
            outcome = Outcome(ended=False)  # the job let go (the worker stops): it handed itself back
        except Exception as exc:  # the job function's own defect: arq would fail the job for good
            log.exception("job_crashed", job_id=job_id)
            ending = TryRecord(False, f"{type(exc).__name__}: {exc}", start_ms, _now_ms())
            outcome = self._ended(job_id, job, job_try, ending)
            self.jobs_failed += 1
        finally:
            self.job_tasks.pop(job_id, None)
            self._free(job_id)
        await asyncio.shield(self._finish(job_id, outcome))

    def _ended(self, job_id: str, job: JobRecord, job_try: int, ending: TryRecord) -> Outcome:
        """The outcome of a job that ended, with arq's result record."""
        record = result_record(job_id, job, job_try, ending, self.runtime.settings.queue, dump_job)
        return Outcome(ended=True, result=record)

    async def _finish(self, job_id: str, outcome: Outcome) -> None:
        """Apply the outcome, fenced by this process's lease on the job (workers.finish)."""
        token = self.runtime.leases.pop(job_id, None)
        try:
            await self._finisher.finish(job_id, token, outcome)
        except RedisError as exc:  # the lease lapses, and the job is resumed then
            self.runtime.outage.failed("finish", exc)
            log.info("finish_lost", job_id=job_id, error=str(exc))
        else:
            self.runtime.outage.answered()

    def handle_sig(self, signum: int) -> None:
        if self._stopper is not None:
            return
        self.allow_pick_jobs = False
        log.info("worker_stopping", signal=signal.Signals(signum).name, running=len(self.job_tasks))
        for task in list(self.job_tasks.values()):
            task.cancel()
        self._stopper = asyncio.create_task(self._stop_when_released())

    async def _stop_when_released(self) -> None:
        with contextlib.suppress(RedisError):
            await self._claimer.leave()
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.runtime.settings.stop_grace_s + 5)
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        self._stopped.set()
        self._wake.set()
