"""Each JSON value the fleet keeps in Redis has one model, written and read by both sides through it
(service.core.models.redis_value.RedisValue); a value that is not one is left out, never a crash."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from service.client.client import TunefleetClient
from service.core import keys
from service.core.io.connection import connect
from service.core.models.status import RunningCase
from service.core.settings import FleetSettings
from service.kinds.goals.state import GoalSummary
from workers.main import announce
from workers.runtime import WorkerRuntime

WAIT_S = 10.0


async def test_status_reads_the_presence_a_worker_announces(settings: FleetSettings) -> None:
    """The presence a worker announces shows in status as it wrote it (name, slots, the cases it
    holds); a garbled presence beside it is left out of the list."""
    redis = await connect(settings)
    runtime = WorkerRuntime(settings, redis, name="w1")
    runtime.leases["case:t1:c1:1"] = 7
    await redis.zadd(keys.workers(), {"garbled": 1})
    await redis.set(keys.worker("garbled"), b'{"slots": "many"')
    announcing = asyncio.create_task(announce(redis, runtime))
    try:
        async with TunefleetClient(settings) as client, asyncio.timeout(WAIT_S):
            while not (workers := (await client.status()).workers):
                await asyncio.sleep(0.05)  # polls for the condition; the deadline bounds it
        assert [(w.name, w.slots, w.cases) for w in workers] == [
            ("w1", settings.concurrency, ["case:t1:c1:1"])
        ]
    finally:
        announcing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcing
        await redis.aclose()


async def test_running_entries_are_read_as_the_model_workers_write(settings: FleetSettings) -> None:
    """`TunefleetClient.running` gives each entry of the running hash as a RunningCase, and leaves out
    one that is not."""
    entry = RunningCase(case="c1", rev=1, worker="w1", step="run", phase="nomem", attempt=1)
    async with TunefleetClient(settings) as client:
        await client.redis.hset(
            keys.running("t1"),
            mapping={"case:t1:c1:1": entry.model_dump_json(), "case:t1:c2:1": "not json"},
        )  # type: ignore[misc]
        assert await client.running("t1") == {"case:t1:c1:1": entry}


async def test_goal_summaries_are_read_as_the_model_workers_write(settings: FleetSettings) -> None:
    """The goals' summaries in `tf:goals` are read as GoalSummary, and a garbled one is left out of the
    list instead of failing it."""
    summary = GoalSummary(id="g1", status="running", iteration=2, updated_at=datetime.now(UTC))
    async with TunefleetClient(settings) as client:
        await client.redis.hset(keys.goals(), mapping={"g1": summary.model_dump_json(), "g2": '{"id": "g2"'})  # type: ignore[misc]
        assert await client.goals.summaries() == [summary]
