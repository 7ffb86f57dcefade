"""The ways a job goes back to the queue without ending, for the job envelope (workers.envelope): a
provider outage (bounded by `provider_handbacks_max`), a refused key (its tuning held), a full store or
Redis, a stopping worker, locked files. None marks anything or spends a try."""

from __future__ import annotations

from typing import Any, Literal, NoReturn, Protocol

import structlog
from arq import Retry

from service.core import keys
from service.core.models.events import EventKind
from service.core.models.jobs import JobResult
from workers.errors import KeyRefused, ProviderDown
from workers.job_run import JobRun
from workers.lease import JobLease
from workers.runtime import WorkerRuntime
from workers.tasks import quietly

log = structlog.get_logger()


class Ends(Protocol):
    """What a hand-back needs of the job's kind (workers.envelope.JobKind): a way to end it."""

    async def end(self, run: Any, state: Literal["failed", "cancelled"], reason: str) -> JobResult: ...


HANDBACKS_TTL_MS = 7 * 86_400_000
"""A job's count of provider hand-backs outlives its last hand-back this long (FINISH deletes it at the
job's end)."""


async def store_outage(runtime: WorkerRuntime, lease: JobLease, reason: str, redis: bool = False) -> NoReturn:
    """The store (or Redis) is full: no fault of the job's. Stop claiming here, tell the fleet once,
    hand the job back marking nothing (its records are written again when it runs again)."""
    await runtime.store_watch.report(reason, redis=redis)
    defer_s = runtime.settings.poll_delay_s
    await quietly(lease.requeue(defer_s))
    raise Retry(defer=defer_s) from None


async def provider_down(kind: Ends, run: JobRun, exc: ProviderDown) -> JobResult:
    """Hand the job back for `provider_retry_s`, no try spent; past `provider_handbacks_max` hand-backs
    (counted in Redis across workers, reset when the job ends) it ends failed with the provider's last
    error instead: an outage that outlasts the bound is not waited for forever."""
    log.warning("provider_down", error=str(exc))
    settings = run.settings
    async with run.runtime.redis.pipeline(transaction=True) as pipe:
        pipe.incr(keys.handbacks(run.job_id))
        pipe.pexpire(keys.handbacks(run.job_id), HANDBACKS_TTL_MS)
        count, _ = await pipe.execute()
    if int(count) <= settings.provider_handbacks_max:
        run.note_handback(int(count), str(exc))
    await run.settle_spend()
    if int(count) > settings.provider_handbacks_max:
        reason = (
            f"the provider stayed down through {int(count) - 1} hand-backs (provider_handbacks_max): {exc}"
        )
        return await kind.end(run, "failed", reason)
    await hand_back(run, str(exc), settings.provider_retry_s, handbacks=int(count))


async def key_refused(kind: Ends, run: JobRun, exc: KeyRefused) -> JobResult:
    """Hold the job's tuning until the key is accepted, and hand the job back (no tuning to hold: it
    fails, naming what to do)."""
    log.error("provider_key_refused", error=str(exc))
    await run.settle_spend()
    if run.tuning is None:
        reason = f"{exc}; it has no tuning to hold: start it again once the key is accepted"
        return await kind.end(run, "failed", reason)
    await quietly(run.controls.hold(run.tuning.name, "auth", str(exc)))
    await hand_back(run, str(exc), run.settings.provider_retry_s)


async def let_go(run: JobRun) -> None:
    """The worker is stopping: land the records started, record what was spent, give the job back to
    the queue at once."""
    await quietly(run.landed())
    await quietly(run.settle_spend())
    if await quietly(run.lease.requeue()):
        await quietly(run.let_go(run.requeued, "the worker stopped"))


async def hand_back(
    run: JobRun,
    reason: str,
    defer_s: float,
    kind: EventKind = EventKind.PROVIDER_DOWN,
    *,
    handbacks: int = 0,
) -> NoReturn:
    """The job cannot go on here now, through no fault of its own (an LLM provider stayed down or refused
    the key; its files are locked): give it back to the queue for `defer_s`, marking nothing and spending
    no try (the step runs again from its start), announced with `kind`'s event (with `handbacks`, the
    job's count of provider hand-backs so far)."""
    await quietly(run.landed())
    if await quietly(run.lease.requeue(defer_s)):
        data: dict[str, Any] = {"retry_in_s": defer_s}
        if handbacks:
            data["handbacks"] = handbacks
        await quietly(run.let_go(kind, reason, data))
    raise Retry(defer=defer_s) from None
