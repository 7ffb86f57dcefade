"""Fencing tokens after Redis lost its last writes (service.core.io.lua.NEXT_TOKEN): a real redis-server is
killed and started again from a snapshot taken before a grant, as a restart from an RDB file or a
failover to a replica that the grant had not reached leaves it. The holder of the lost grant must never
find a new holder's token equal to its own, or both would pass the fence."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from service.core import keys
from service.core.io.batch import RedisBatch
from tests.support.redis_server import RedisServer
from workers.errors import LeaseLost, LockLost
from workers.lease import JobLease
from workers.lock import ImprovementsLock, LockHold
from workers.outage import RedisOutage

QUEUE = "tf:queue"
JOB = "case:t1:c1:1"


def snapshot_then_lose_what_follows(server: RedisServer) -> None:
    """Keep the state as it is now (SAVE writes the RDB file the server starts from)."""
    with server.client() as client:
        client.save()


async def test_a_lock_granted_after_its_grant_was_lost_has_a_new_token(redis_server: RedisServer) -> None:
    """The improvements lock is granted, then Redis restarts from a snapshot taken just before: the next
    grant gets a greater token, and the first holder's publish is refused instead of passing for it."""
    snapshot_then_lose_what_follows(redis_server)
    async with Redis.from_url(redis_server.url) as redis:
        first = await ImprovementsLock(redis, "t1", lease_s=30).try_acquire("case:t1:c1:1")
        assert first is not None
    redis_server.restart()  # SIGKILL, then the RDB file: the grant above is gone, the counter older
    async with Redis.from_url(redis_server.url) as redis:
        assert await redis.get(keys.lock("t1")) is None
        await redis.set(keys.version("t1"), "base")
        second = await ImprovementsLock(redis, "t1", lease_s=30).try_acquire("case:t1:c2:1")
        assert second is not None and second.token > first.token
        stale = LockHold(redis, "t1", first.token, first.lease_ms, RedisOutage(backoff_max_s=1))
        with pytest.raises(LockLost):  # the old code granted the same token again: this publish passed
            await stale.publish("stale-version", base="base")
        assert await redis.get(keys.version("t1")) == b"base"
        await second.publish("new-version", base="base")
        assert await redis.get(keys.version("t1")) == b"new-version"


async def test_a_lease_granted_after_its_grant_was_lost_has_a_new_token(redis_server: RedisServer) -> None:
    """A case's lease is granted, then Redis restarts from a snapshot taken just before: another worker's
    grant gets a greater token, and the first holder's lease check fails (its writes are refused)."""
    async with Redis.from_url(redis_server.url) as redis:
        await redis.zadd(QUEUE, {JOB: 0})
    snapshot_then_lose_what_follows(redis_server)
    async with Redis.from_url(redis_server.url) as redis:
        first, _ = await JobLease.acquire(RedisBatch(redis), QUEUE, JOB, 30, "t1", worker="w1")
        assert first is not None
    redis_server.restart()
    async with Redis.from_url(redis_server.url) as redis:
        batch = RedisBatch(redis)
        second, _ = await JobLease.acquire(batch, QUEUE, JOB, 30, "t1", worker="w2")
        assert second is not None and second.token > first.token
        stale = JobLease(batch, QUEUE, JOB, 30, first.token, worker="w1")
        with pytest.raises(LeaseLost):
            await stale.check()
        await second.check()
