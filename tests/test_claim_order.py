"""The order in which one claim takes due jobs (workers/claim.py), on a real Redis: jobs that ran before
ahead of fresh ones, group suspects ahead of an isolated one, and never a job the worker still runs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis

from service.core import keys
from service.core.io.arq_contact import RESUME_SHIFT_MS
from service.core.io.connection import connect
from service.core.models.jobs import CaseJob
from service.core.settings import FleetSettings
from service.kinds.cases.fleet import enqueue_cases
from workers.claim import Claimed, Claimer


@pytest.fixture
async def pool(settings: FleetSettings) -> AsyncIterator[ArqRedis]:
    redis = await connect(settings)
    yield redis
    await redis.aclose()


async def _queue(pool: ArqRedis, settings: FleetSettings, fresh: list[str], resumed: dict[str, str]) -> None:
    """Fresh cases enqueued as the client does; `resumed` cases (name -> suspicion level, '' for none)
    due in the resume band, as a lapsed lease leaves them."""
    jobs = [CaseJob(tuning="t1", case=name, rev=1) for name in [*fresh, *resumed]]
    assert all(await enqueue_cases(pool, settings.queue, jobs, 1_000))
    for n, (name, level) in enumerate(resumed.items()):
        job_id = CaseJob(tuning="t1", case=name, rev=1).job_id
        await pool.zadd(settings.queue, {job_id: 2_000 + n - RESUME_SHIFT_MS})
        if level:
            await pool.set(keys.suspect(job_id), level)


def _names(claimed: list[Claimed]) -> list[str]:
    return [c.job_id.split(":")[2] for c in claimed]


async def test_resumed_jobs_come_before_fresh_ones(pool: ArqRedis, settings: FleetSettings) -> None:
    """Three fresh cases enqueued long ago and two resumed ones due just now: two free slots take the two
    resumed cases."""
    await _queue(pool, settings, ["f1", "f2", "f3"], {"r1": "", "r2": ""})
    claimed = await Claimer(pool, settings.queue, "w:1", 100, 1_000).claim(2, 10_000, [], ())
    assert _names(claimed) == ["r1", "r2"]


async def test_group_suspects_come_before_an_isolated_one(pool: ArqRedis, settings: FleetSettings) -> None:
    """An isolated suspect due first and two group suspects after it: a claim of three slots takes the
    group suspects and a fresh case, leaving the isolated suspect to a worker that takes no suspect."""
    await _queue(pool, settings, ["f1"], {"iso": "isolate", "g1": "group", "g2": "group"})
    first = await Claimer(pool, settings.queue, "w:1", 100, 1_000).claim(3, 10_000, [], ())
    assert _names(first) == ["g1", "g2", "f1"]
    second = await Claimer(pool, settings.queue, "w:2", 100, 1_000).claim(3, 10_000, [], ())
    assert _names(second) == ["iso"]


async def test_a_worker_does_not_claim_a_job_it_still_runs(pool: ArqRedis, settings: FleetSettings) -> None:
    """A due job whose try still runs on this worker (its lease lapsed under it) is left to other workers."""
    await _queue(pool, settings, [], {"r1": ""})
    job_id = CaseJob(tuning="t1", case="r1", rev=1).job_id
    assert await Claimer(pool, settings.queue, "w:1", 100, 1_000).claim(1, 10_000, [], {job_id}) == []
    assert _names(await Claimer(pool, settings.queue, "w:2", 100, 1_000).claim(1, 10_000, [], ())) == ["r1"]
