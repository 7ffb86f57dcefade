"""Whether jobs are idle: neither waiting in the queue nor leased by a worker. The daemons' reconciliation
(of cases, evaluations and goals) requeues such jobs that have not ended; gc forgets the cancels of such
jobs that ended."""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from service.core import keys


async def idle(redis: Redis, queue: str, job_ids: Sequence[str]) -> list[bool]:
    """For each job, whether it has no queue entry and no lease (one round trip for all of them)."""
    if not job_ids:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.zscore(queue, job_id)
            pipe.exists(keys.lease(job_id))
        replies = await pipe.execute()
    return [queued is None and not leased for queued, leased in zip(replies[::2], replies[1::2], strict=True)]
