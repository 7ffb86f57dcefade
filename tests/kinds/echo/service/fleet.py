"""The echo kind's fleet side: submitting and cancelling echo jobs, and the daemon's reconciliation."""

from __future__ import annotations

import asyncio

from service.core import keys
from service.core.kinds import FleetParts
from service.core.store import Store, TuningStore
from tests.kinds.echo.service.models import ECHO_FUNCTION, EchoJob, EchoSpec
from tests.kinds.echo.service.store import EchoStore


class EchoFleet:
    """Echo jobs as the daemon and a test's client see them."""

    def __init__(self, parts: FleetParts) -> None:
        self._parts = parts

    async def submit(self, tuning: str, echo: str, steps: int) -> EchoJob:
        """Write the job's spec, then enqueue it."""
        spec = EchoSpec(tuning=tuning, echo=echo, steps=steps)
        await asyncio.to_thread(EchoStore(self._parts.store, tuning, echo).create, spec)
        job = EchoJob(tuning=tuning, echo=echo)
        await self._parts.redis.enqueue_job(ECHO_FUNCTION, job.model_dump(), _job_id=job.job_id)
        return job

    async def cancel(self, tuning: str, echo: str) -> None:
        """Mark the job cancelled in its tuning's cancel set: its worker stops it within a poll."""
        job = EchoJob(tuning=tuning, echo=echo)
        await self._parts.redis.sadd(keys.cancelled(job.scope), job.job_id)  # type: ignore[misc]

    async def reconcile(self) -> int:
        """Enqueue every echo job with no result, no queue entry and no lease; how many. The store is read
        in a thread and Redis asked about every job in one round trip, as the built-in kinds do."""
        unfinished = await asyncio.to_thread(_unfinished, self._parts.store)
        if not unfinished:
            return 0
        redis = self._parts.redis
        async with redis.pipeline(transaction=False) as pipe:
            for job in unfinished:
                pipe.zscore(self._parts.settings.queue, job.job_id)
                pipe.exists(keys.lease(job.job_id))
            replies = await pipe.execute()
        enqueued = 0
        for job, queued, leased in zip(unfinished, replies[0::2], replies[1::2], strict=True):
            if queued is None and not leased:
                await redis.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id))
                if await redis.enqueue_job(ECHO_FUNCTION, job.model_dump(), _job_id=job.job_id):
                    enqueued += 1
        return enqueued

    def stored_counters(self, tuning: TuningStore) -> dict[str, int]:
        """`echo_<state>` for every ended echo job of the tuning, as its result files say."""
        counts: dict[str, int] = {}
        for found in EchoStore.every(self._parts.store, tuning.name):
            result = found.result()
            if result is not None:
                counts[f"echo_{result.state}"] = counts.get(f"echo_{result.state}", 0) + 1
        return counts


def _unfinished(store: Store) -> list[EchoJob]:
    """The jobs of every echo job with no result."""
    return [
        EchoJob(tuning=found.spec().tuning, echo=found.spec().echo)
        for found in EchoStore.every(store)
        if found.result() is None
    ]
