"""The arq job function: one case, under a lease, to its end or until the worker lets it go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import structlog
from arq import Retry
from redis.exceptions import RedisError

from service.core.errors import TunefleetError
from service.core.models.jobs import CaseJob
from service.core.models.records import CaseResult, Note
from workers.case import CaseRun
from workers.errors import KeyRefused, LeaseLost, ProviderDown
from workers.lease import CaseLease
from workers.loop import finish, run_loop
from workers.runtime import WorkerRuntime
from workers.tasks import hand_back, quietly, watched

log = structlog.get_logger()


async def run_case(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Run one case; the returned dict is arq's job result (JSON)."""
    runtime: WorkerRuntime = ctx["runtime"]
    job = CaseJob.model_validate(payload)
    lease, grant = await runtime.acquire(job.job_id, job.tuning)
    lost, cancelled = grant.lost, grant.cancelled
    structlog.contextvars.bind_contextvars(tuning=job.tuning, case=job.case, rev=job.rev, worker=runtime.name)
    try:
        cr = runtime.case_run(job, lease)
    except TunefleetError as exc:
        return await unreadable(runtime, job, lease, cancelled, exc)
    try:
        data = {
            "lease": lease.token,
            "lost_leases": lost,
            "suspect": grant.level or None,
            "try": ctx["job_try"],
        }
        await cr.emit("case_started", data=data)
        if cancelled:
            result = await finish(cr, "cancelled", None, "cancelled before it started")
        elif lost >= runtime.settings.max_lease_losses:
            result = await finish(cr, "failed", None, f"poison: the case lost its lease {lost} times")
        else:
            result = await supervised(cr)
    except LeaseLost as exc:
        log.warning("lease_lost", error=str(exc))
        await quietly(cr.emit("lease_lost", detail=str(exc)))
        return {"lease_lost": lease.token}
    except RedisError as exc:
        log.warning("redis_lost_mid_case", error=str(exc))
        await hand_back(lease, runtime.settings.poll_delay_s)
    except KeyRefused as exc:
        log.error("provider_key_refused", error=str(exc))
        await quietly(runtime.controls.hold(job.tuning, "auth", str(exc)))
        await _hand_back(cr, str(exc), runtime.settings.provider_retry_s)
        raise Retry(defer=runtime.settings.provider_retry_s) from None
    except ProviderDown as exc:
        log.warning("provider_down", error=str(exc))
        await _hand_back(cr, str(exc), runtime.settings.provider_retry_s)
        raise Retry(defer=runtime.settings.provider_retry_s) from None
    except asyncio.CancelledError:
        if job.job_id not in runtime.controls.cancelling:
            await asyncio.shield(_let_go(cr))
            raise
        runtime.controls.cancelling.discard(job.job_id)
        result = await asyncio.shield(finish(cr, "cancelled", None, "cancelled by the user"))
    except Exception as exc:
        # A defect or a broken environment, not the prose: visible as failed, run again on the next start.
        log.exception("case_crashed")
        result = await finish(cr, "failed", None, f"internal error: {type(exc).__name__}: {exc}")
    return {"state": result.state, "reason": result.reason, "steps": result.steps}


async def unreadable(
    runtime: WorkerRuntime, job: CaseJob, lease: CaseLease, cancelled: bool, exc: TunefleetError
) -> dict[str, Any]:
    """The tuning's config or the case file cannot be read: end the case `failed` (or `cancelled`, if it
    was) with the file and the problem as its reason, so that it is finished, counted and not run in a
    loop; the event is sent even when the case's folder cannot be written."""
    state = "cancelled" if cancelled else "failed"
    reason = f"the case could not be loaded: {exc}"
    log.error("case_unreadable", error=str(exc))
    try:
        done = await _end_unreadable(runtime, job, lease, state, reason)
    except LeaseLost as lost:
        log.warning("lease_lost", error=str(lost))
        return {"lease_lost": lease.token}
    except RedisError as lost_redis:
        log.warning("redis_lost_mid_case", error=str(lost_redis))
        await hand_back(lease, runtime.settings.poll_delay_s)
    if done is not None:
        return {"state": done.state, "reason": done.reason, "steps": done.steps}
    return {"state": state, "reason": reason, "steps": 0}


async def _end_unreadable(
    runtime: WorkerRuntime, job: CaseJob, lease: CaseLease, state: str, reason: str
) -> CaseResult | None:
    """Write the result (fenced) and send its event; the result it already had, if it had one."""
    store = runtime.store.tuning(job.tuning).case(job.case, job.rev)
    try:
        done = store.result()
        if done is not None:  # ended before (its event was sent then): nothing to do again
            return done
        await lease.check()
        result = CaseResult(case=job.case, rev=job.rev, state=state, reason=reason, at=datetime.now(UTC))
        store.write_result(result)
        if state == "failed":
            store.add_note(Note(at=result.at, kind="failed", rev=job.rev, text=reason, worker=runtime.name))
    except LeaseLost:
        raise  # another worker owns the case now: it writes the result
    except (OSError, TunefleetError) as unwritable:
        log.error("case_result_unwritable", error=str(unwritable), reason=reason)
    try:
        await runtime.sink.emit(
            f"case_{state}", job.tuning, case=job.case, rev=job.rev, detail=reason, running=(job.job_id, None)
        )
    except OSError as unwritable:  # the tuning's events file: the counters have not moved either
        log.error("case_event_unwritable", error=str(unwritable), reason=reason)
    return None


async def supervised(cr: CaseRun) -> CaseResult:
    """The loop, with the lease's heartbeat beside it: a lost lease stops the loop at once."""
    async with watched(cr.lease.heartbeat()):
        return await run_loop(cr)


async def _let_go(cr: CaseRun) -> None:
    """The worker is stopping: give the case back to the queue so another worker resumes it."""
    if await quietly(cr.lease.requeue()):
        cr.at(None)
        await quietly(cr.emit("case_requeued", detail="the worker stopped"))


async def _hand_back(cr: CaseRun, reason: str, defer_s: float) -> None:
    """An LLM provider stayed down: give the case back to the queue for `defer_s`, marking nothing and
    spending no try (the step runs again from its start when the case is taken again)."""
    if await quietly(cr.lease.requeue(defer_s)):
        cr.at(None)
    await quietly(cr.emit("provider_down", detail=reason, data={"retry_in_s": defer_s}))
