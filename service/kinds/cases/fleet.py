"""The case kind's fleet side: enqueueing case jobs, and the daemon's reconciliation and restore of a
tuning's cases from the store (the cases' folders are the truth; service.kinds.cases.counters)."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from service.core import keys
from service.core.events import EventSink
from service.core.io.arq_contact import ENQUEUE, job_record
from service.core.io.connection import JOB_EXPIRY_MS
from service.core.io.idle import idle
from service.core.kinds import FleetParts
from service.core.models.events import EventKind
from service.core.models.jobs import CASE_FUNCTION, CaseJob, dump_job
from service.core.models.records import COST_SCALE
from service.core.store import TuningStore
from service.kinds.cases.counters import stored_runs
from service.kinds.registry import counter_rules

RECONCILE_CHUNK = 500
"""Cases whose queue entry and lease are asked for in one round trip of the reconciliation."""


async def enqueue_cases(redis: Redis, queue: str, jobs: list[CaseJob], now_ms: int) -> list[bool]:
    """Enqueue case jobs in one round trip, each as arq's `enqueue_job` would at `now_ms` (refused while
    the id has a job record or a result); which were accepted."""
    if not jobs:
        return []
    enqueue = redis.register_script(ENQUEUE)
    async with redis.pipeline(transaction=False) as pipe:
        for job in jobs:
            record = job_record(CASE_FUNCTION, job.model_dump(), now_ms, dump_job)
            job_keys = [keys.arq_job(job.job_id), keys.arq_result(job.job_id), queue]
            await enqueue(job_keys, [record, JOB_EXPIRY_MS, now_ms, job.job_id], client=pipe)
        replies = await pipe.execute()
    return [bool(reply) for reply in replies]


class CaseFleet:
    """The cases of every tuning in the store, as the daemon keeps them in agreement with Redis."""

    def __init__(self, parts: FleetParts) -> None:
        self._parts = parts
        self._sink = EventSink(
            parts.redis, parts.store, parts.settings.events_max, counter_rules(parts.settings)
        )

    async def reconcile(self) -> int:
        """Enqueue every orphaned unfinished case of every tuning: one with neither a queue entry nor a
        lease (its recorded steps are kept in the store); how many were enqueued."""
        total = 0
        for name in self._parts.store.tuning_names():
            total += await self._reconcile_tuning(self._parts.store.tuning(name))
        return total

    def stored_counters(self, tuning: TuningStore) -> dict[str, int]:
        return case_counts(tuning)

    async def _reconcile_tuning(self, tuning: TuningStore) -> int:
        """Enqueue the tuning's orphaned unfinished cases, their lost cancels given back first."""
        redis = self._parts.redis
        jobs, cancelled = await asyncio.to_thread(unfinished_cases, tuning)  # a walk of every case folder
        if cancelled:  # cancels that Redis lost: given back to the workers that take these cases
            await redis.sadd(keys.cancelled(tuning.name), *cancelled)  # type: ignore[misc]
        enqueued = 0
        for first in range(0, len(jobs), RECONCILE_CHUNK):  # the loop serves the API between chunks
            chunk = jobs[first : first + RECONCILE_CHUNK]
            free = await idle(redis, self._parts.settings.queue, [job.job_id for job in chunk])
            orphans = [job for job, is_idle in zip(chunk, free, strict=True) if is_idle]
            enqueued += await self._requeue(tuning.name, orphans)
        return enqueued

    async def _requeue(self, tuning: str, orphans: list[CaseJob]) -> int:
        """Enqueue cases that have neither a queue entry nor a lease (their stale job records removed first)
        and send their `case_requeued` events, a round trip each for all of them; how many were enqueued."""
        if not orphans:
            return 0
        redis = self._parts.redis
        async with redis.pipeline(transaction=False) as pipe:
            for job in orphans:
                pipe.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id))
            await pipe.execute()
        accepted = await enqueue_cases(redis, self._parts.settings.queue, orphans, int(time.time() * 1000))
        requeued = [job for job, ok in zip(orphans, accepted, strict=True) if ok]
        detail = "reconciled: no queue entry and no lease"
        items = [{"case": job.case, "rev": job.rev, "detail": detail} for job in requeued]
        await self._sink.emit_many(EventKind.CASE_REQUEUED, tuning, items)
        return len(requeued)


def unfinished_cases(tuning: TuningStore) -> tuple[list[CaseJob], list[str]]:
    """The jobs of the tuning's unfinished cases, and the ids of those among them cancelled in the store
    (made in a thread: `TuningStore.unfinished` walks every case folder)."""
    unfinished = tuning.unfinished()
    jobs = [CaseJob(tuning=tuning.name, case=c.case_id, rev=c.rev) for c in unfinished]
    cancelled = [job.job_id for job, c in zip(jobs, unfinished, strict=True) if c.cancel_requested()]
    return jobs, cancelled


def case_counts(tuning: TuningStore) -> dict[str, int]:
    """The counters the tuning's case folders give (their results and their tries)."""
    counts: dict[str, int] = {
        "queued": 0,
        "tokens": 0,
        "tokens_unmeasured": 0,
        "tokens_estimated": 0,
        "cost_usd_micros": 0,
    }
    for case in tuning.latest_revs():
        counts["queued"] += 1
        for field, runs in stored_runs(case).items():
            counts[field] = counts.get(field, 0) + runs
        result = case.result()
        if result is not None:
            counts[f"state:{result.state}"] = counts.get(f"state:{result.state}", 0) + 1
            counts["tokens"] += result.usage.tokens
            counts["tokens_unmeasured"] += result.usage.unmeasured_tokens
            counts["tokens_estimated"] += result.usage.estimated_tokens
            counts["cost_usd_micros"] += round(result.usage.cost_usd * COST_SCALE)
    return counts
