"""RedisBatch: the calls of many tasks in one loop turn share a round trip, and each caller still gets
its own result or its own error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from service.core.io.batch import RedisBatch
from tests.support.redis_server import RedisServer

CALLS = 50


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def _reads(redis: Redis) -> int:
    return int((await redis.info("stats"))["total_reads_processed"])


async def test_calls_of_one_loop_turn_share_one_round_trip(redis: Redis) -> None:
    """Fifty tasks calling at once cost Redis a few reads, not fifty, and each gets its own reply."""
    batch = RedisBatch(redis)
    await redis.mset({f"k{i}": i for i in range(CALLS)})
    before = await _reads(redis)
    replies = await asyncio.gather(*(batch.command("GET", f"k{i}") for i in range(CALLS)))
    used = await _reads(redis) - before - 1  # less the INFO that measures
    assert replies == [str(i).encode() for i in range(CALLS)]
    assert used <= 3, f"{used} reads for {CALLS} calls"


async def test_a_failing_call_fails_only_its_caller(redis: Redis) -> None:
    """A script error reaches the task whose call it was; the other calls of the batch succeed."""
    batch = RedisBatch(redis)
    ok = redis.register_script("return ARGV[1]")
    bad = redis.register_script("return redis.error_reply('refused: ' .. ARGV[1])")
    calls = [batch.script(ok, [], ["a"]), batch.script(bad, [], ["b"]), batch.script(ok, [], ["c"])]
    good1, failed, good2 = await asyncio.gather(*calls, return_exceptions=True)
    assert (good1, good2) == (b"a", b"c")
    assert isinstance(failed, ResponseError) and "refused: b" in str(failed)


async def test_scripts_flushed_from_redis_are_loaded_again(redis: Redis) -> None:
    """After Redis lost its scripts (a restart, SCRIPT FLUSH), a script call loads it and still answers."""
    batch = RedisBatch(redis)
    script = redis.register_script("return tonumber(ARGV[1]) * 2")
    assert await batch.script(script, [], [21]) == 42
    await redis.script_flush()
    assert list(await asyncio.gather(batch.script(script, [], [1]), batch.script(script, [], [2]))) == [2, 4]


async def test_a_call_cancelled_before_the_batch_left_is_not_sent(redis: Redis) -> None:
    """A caller cancelled in the same loop turn leaves Redis untouched; the others' calls run."""
    batch = RedisBatch(redis)
    cancelled = asyncio.ensure_future(batch.command("INCR", "cancelled"))
    kept = asyncio.ensure_future(batch.command("INCR", "kept"))
    await asyncio.sleep(0)  # both calls are queued, the batch has not left yet
    cancelled.cancel()
    assert await kept == 1
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await redis.get("cancelled") is None


async def test_a_call_queued_after_a_failed_future_is_not_sent(redis: Redis) -> None:
    """A script call queued `after` a future that the loop's next turn fails (as the event sink's line
    write) is cancelled and never reaches Redis; one after a future that succeeds is sent."""
    batch = RedisBatch(redis)
    loop = asyncio.get_running_loop()
    script = redis.register_script("return redis.call('INCR', KEYS[1])")
    await redis.script_load(script.script)
    bad: asyncio.Future[None] = loop.create_future()
    good: asyncio.Future[None] = loop.create_future()
    dropped = batch.queue_script(script, ["dropped"], [], after=bad)
    sent = batch.queue_script(script, ["sent"], [], after=good)
    loop.call_soon(bad.set_exception, OSError("disk full"))
    loop.call_soon(good.set_result, None)
    assert await sent == 1
    assert dropped.cancelled()
    assert await redis.get("dropped") is None
    with pytest.raises(OSError, match="disk full"):
        await bad


async def test_a_lost_connection_fails_every_caller_of_the_batch(redis_server: RedisServer) -> None:
    """With Redis gone, every caller of the batch gets the connection error (nobody waits forever)."""
    client = Redis.from_url(redis_server.url)
    try:
        batch = RedisBatch(client)
        assert await batch.command("PING") is True
        redis_server.stop()
        results = await asyncio.gather(*(batch.command("GET", "x") for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results
    finally:
        await client.aclose()
