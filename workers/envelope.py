"""The life of a leased job, whatever its kind (docs/architecture.md, "Job kinds"):

    prepare it                     (no lease yet) what may take long: the LLM adapters' modules, the
                                   job's clients warmed
    take the lease (with the losses that count against the job, its suspicion and whether it was
        cancelled: one script, workers.lease)
    load the job                   one that cannot be loaded ends failed (or cancelled), naming why;
                                   the lease's heartbeat runs beside the load (it may wait for a lock)
    cancelled before it started    ends cancelled
    lost its lease too often       ends failed: poison
    crashed at its claim           (an exception its load or its end did not expect) counted like a lost
                                   lease and handed back; at `max_lease_losses` it ends failed: poison
    pursue it                      the kind's body, the lease's heartbeat beside it
    on the way out                 every exception is one outcome, the same for every kind:
        LeaseLost          another worker owns the job: write nothing, stop
        RedisError         hand the job back (it runs again once Redis answers)
        a full store       ENOSPC or EDQUOT, or Redis's OOM refusal, wherever it is met (the load,
          or Redis         the body, the end): hand the job back, nothing marked, no try spent, and
                           stop claiming until a probe writes (workers.store_full)
        ProviderDown       hand it back for `provider_retry_s`: no try spent, nothing marked; past
                           `provider_handbacks_max` hand-backs, end failed with the provider's error
        KeyRefused         hold the job's tuning and hand the job back (no tuning to hold: it fails)
        FilesBusy          hand the job back for `lease_s`: another process holds its files' lock
        JobFault           end failed, with the fault as the reason
        cancelled          by the user: end cancelled, naming the step it stopped; by a stopping
                           worker (SIGTERM): hand the job back
        anything else      end failed: internal error
    and whatever the way out, what the agent call under way spent is recorded first.

A kind (JobKind) brings only its own: its payload model, how it is loaded, its body (`pursue`) and how
it ends; its run context (a workers.job_run.JobRun) carries the rest.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from typing import Any, Generic, Literal, TypeVar

import structlog
from arq import Retry
from redis.exceptions import RedisError

from service.core.errors import TunefleetError
from service.core.models.events import EventKind
from service.core.models.jobs import JobResult, LeasedJob
from workers.errors import FilesBusy, JobFault, KeyRefused, LeaseLost, ProviderDown, StoreFull
from workers.handback import hand_back, key_refused, let_go, provider_down, store_outage
from workers.job_run import JobRun
from workers.lease import Grant, JobLease
from workers.runtime import WorkerRuntime
from workers.store_full import outage_of, redis_full
from workers.tasks import quietly, watched

log = structlog.get_logger()


J = TypeVar("J", bound=LeasedJob)
R = TypeVar("R", bound=JobRun)
Ending = Literal["failed", "cancelled"]
"""The ends the envelope itself gives a job; a kind's body gives the others."""


class JobKind(ABC, Generic[J, R]):
    """One kind of leased job: a kind is a subclass of this, its models and its body, held as `KIND` by
    the module its slice names (service.core.kinds, workers.jobs)."""

    function: str
    """arq's name of the job function (service.core.models.jobs)."""
    noun: str
    """The kind's word in reasons and logs."""
    payload: type[J]
    """The job's payload model."""

    def run_view_of(self, runtime: WorkerRuntime, job: J) -> str | None:
        """The tuning whose run view (its pending applies and its version) the lease's script reads for
        the job's first run start (None: the kind's runs read none, or read it themselves)."""
        return None

    async def prepare(self, runtime: WorkerRuntime, job: J) -> None:
        """What may take long before the lease is taken (whose heartbeat starts with it): the
        modules of the job's LLM adapters, imported in a thread the first time, and its clients warmed
        in that thread. It raises nothing: what it cannot read, the load names."""
        return None

    @abstractmethod
    async def load(self, runtime: WorkerRuntime, job: J, lease: JobLease, grant: Grant, job_try: int) -> R:
        """The job's run context, its start announced; TunefleetError or OSError when it cannot be read."""

    @abstractmethod
    async def unloadable(
        self, runtime: WorkerRuntime, job: J, lease: JobLease, state: Ending, reason: str
    ) -> JobResult:
        """End a job that cannot be loaded (no run context) so that it is finished and not run again."""

    @abstractmethod
    async def pursue(self, run: R) -> JobResult:
        """The kind's body: carry the job on from its first missing step to its end."""

    @abstractmethod
    async def end(self, run: R, state: Ending, reason: str) -> JobResult:
        """End the job durably (or return how it ended, if it had ended already)."""


async def run_job(
    kind: JobKind[J, R], runtime: WorkerRuntime, payload: dict[str, Any], job_try: int
) -> dict[str, Any]:
    """One job, under a lease, to its end or until the worker lets it go; its JobResult as arq's result
    (JSON)."""
    result = await _run_job(kind, runtime, payload, job_try)
    return result.model_dump(mode="json", exclude_none=True)


async def _run_job(
    kind: JobKind[J, R], runtime: WorkerRuntime, payload: dict[str, Any], job_try: int
) -> JobResult:
    job = kind.payload.model_validate(payload)
    await kind.prepare(runtime, job)
    try:
        lease, grant = await runtime.acquire(job.job_id, job.scope, kind.run_view_of(runtime, job))
    except RedisError as exc:
        full = redis_full(exc)
        if full is None:
            raise
        await runtime.store_watch.report(full, redis=True)
        raise Retry(defer=runtime.settings.poll_delay_s) from None
    structlog.contextvars.bind_contextvars(**job.model_dump(), worker=runtime.name)
    try:
        return await _outcome(runtime, lease, _start(kind, runtime, job, lease, grant, job_try))
    except Retry:
        raise
    except Exception as exc:  # a defect that the body's own guard (_lead) does not cover
        return await _crashed_at_claim(kind, runtime, job, lease, exc)
    finally:
        runtime.controls.scopes.pop(job.job_id, None)


async def _crashed_at_claim(
    kind: JobKind[J, R], runtime: WorkerRuntime, job: J, lease: JobLease, exc: Exception
) -> JobResult:
    """A job whose claim raised what nothing expected (its load, its end): counted like a lost lease and
    handed back, so that one that crashes at every claim ends failed (poison) at `max_lease_losses`
    instead of being claimed for ever (issue 54: a goal's deadline past the calendar raised
    OverflowError at every claim)."""
    log.error(f"{kind.noun}_crashed_at_claim", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
    crashes = await quietly(lease.count_loss())
    if crashes is None:  # the lease moved on (its new holder carries the job), or Redis failed it
        raise exc
    limit = runtime.settings.max_lease_losses
    if crashes >= limit:
        reason = f"poison: the {kind.noun} crashed its claim {crashes} times ({type(exc).__name__}: {exc})"
        return await kind.unloadable(runtime, job, lease, "failed", reason)
    defer_s = runtime.settings.lease_s
    await quietly(lease.requeue(defer_s))
    raise Retry(defer=defer_s) from None


async def _start(
    kind: JobKind[J, R], runtime: WorkerRuntime, job: J, lease: JobLease, grant: Grant, job_try: int
) -> JobResult:
    try:
        async with watched(lease.heartbeat()):  # a load may wait (a goal's lock, a first snapshot)
            run = await kind.load(runtime, job, lease, grant, job_try)
    except (LeaseLost, FilesBusy):
        raise
    except (TunefleetError, OSError) as exc:
        if outage_of(exc) is not None:  # the store is full, not the job unreadable
            raise
        log.error(f"{kind.noun}_unreadable", error=str(exc))
        state: Ending = "cancelled" if grant.cancelled else "failed"
        reason = f"the {kind.noun} could not be loaded: {exc}"
        return await kind.unloadable(runtime, job, lease, state, reason)
    return await _lead(kind, run, grant)


async def _outcome(runtime: WorkerRuntime, lease: JobLease, ending: Awaitable[JobResult]) -> JobResult:
    """The job's result; the ways out that leave the job to another worker, or to a later try."""
    try:
        return await ending
    except LeaseLost as exc:
        log.warning("lease_lost", error=str(exc))
        return JobResult(lease_lost=lease.token)
    except RedisError as exc:
        full = redis_full(exc)
        if full is not None:
            await store_outage(runtime, lease, full, redis=True)
        log.warning("redis_lost_mid_job", error=str(exc))
        await quietly(lease.requeue())
        raise Retry(defer=runtime.settings.poll_delay_s) from None
    except FilesBusy as exc:  # from the load or the end (the body's hands back in _lead): nothing is marked
        log.warning("job_files_busy", error=str(exc))
        defer_s = runtime.settings.lease_s
        await quietly(lease.requeue(defer_s))
        raise Retry(defer=defer_s) from None
    except StoreFull as exc:
        await store_outage(runtime, lease, exc.reason, exc.redis)
    except Retry:
        raise
    except Exception as exc:  # met by the load or the end
        outage = outage_of(exc)
        if outage is None:
            raise
        await store_outage(runtime, lease, *outage)


async def _lead(kind: JobKind[J, R], run: R, grant: Grant) -> JobResult:
    settings = run.settings
    try:
        if grant.cancelled or run.cancel_requested:
            return await _cancelled_at_claim(kind, run)
        if grant.lost >= settings.max_lease_losses:
            return await kind.end(run, "failed", f"poison: the {kind.noun} lost its lease {grant.lost} times")
        async with watched(run.lease.heartbeat()):
            return await _pursue(kind, run)
    except LeaseLost as exc:
        await quietly(run.settle_spend())
        await quietly(run.emit(EventKind.LEASE_LOST, detail=str(exc)))
        raise
    except KeyRefused as exc:
        return await key_refused(kind, run, exc)
    except ProviderDown as exc:
        return await provider_down(kind, run, exc)
    except JobFault as fault:
        await run.settle_spend()
        return await kind.end(run, "failed", str(fault))
    except FilesBusy as exc:  # what was spent is in the job's ledger: the next holder records it
        log.warning("job_files_busy", error=str(exc))
        await hand_back(run, str(exc), settings.lease_s, run.requeued)
    except (RedisError, StoreFull):  # the envelope hands the job back
        await quietly(run.settle_spend())
        raise
    except asyncio.CancelledError:
        if run.job_id not in run.controls.cancelling:
            await asyncio.shield(let_go(run))  # the worker is stopping: another resumes the job
            raise
        return await asyncio.shield(_cancelled(kind, run))  # it stays `cancelling` until it leaves
    except Exception as exc:
        # A defect or a broken environment, not the job's own doing: visible as failed, run again later.
        log.exception(f"{kind.noun}_crashed")
        await quietly(run.settle_spend())
        return await kind.end(run, "failed", f"internal error: {type(exc).__name__}: {exc}")
    finally:  # after a way out that sent no event (Redis gone, the lease lost), nobody waits for the queued
        run.abandon_events()
        run.abandon_writes()


async def _pursue(kind: JobKind[J, R], run: R) -> JobResult:
    """The kind's body; a write it met refused for a full store or Redis, however it was met (an
    OSError, a JobFault or a RedisError caused by one), is StoreFull: no fault of the job's."""
    try:
        return await kind.pursue(run)
    except Exception as exc:
        outage = outage_of(exc)
        if outage is None:
            raise
        raise StoreFull(*outage) from exc


async def _cancelled(kind: JobKind[J, R], run: R) -> JobResult:
    await run.settle_spend()
    step = run.step_under_way
    return await kind.end(
        run, "cancelled", f"cancelled by the user{f' during the {step} step' if step else ''}"
    )


async def _cancelled_at_claim(kind: JobKind[J, R], run: R) -> JobResult:
    """A job its claim finds cancelled: before it started, or (handed back mid-step by a holder the
    cancel reached too late) during the step it was at."""
    if run.step_under_way is not None:
        return await _cancelled(kind, run)
    return await kind.end(run, "cancelled", "cancelled before it started")
