"""The hand-off of a provider's fleet-wide permits (workers.adapters.llm.limits) inside one process: a
permit given back goes at once to the oldest call of the process that waits for one. Polls are 30 s
apart here, so without the hand-off every wait below would last a whole poll."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from service.core import keys
from service.core.models.tuning import LlmAdapter
from tests.support.redis_server import RedisServer
from workers.adapters.llm.limits import ProviderLimits

POLL_S = 30.0
BASE_URL = "http://127.0.0.1:9/v1"
MODEL = "permits-model"


def limits_of(redis: Redis, concurrency: int) -> ProviderLimits:
    config = LlmAdapter(kind="llm", base_url=BASE_URL, model=MODEL, api_key_env=None, concurrency=concurrency)
    return ProviderLimits(redis, config, poll_s=(POLL_S, POLL_S))


async def queued(limits: ProviderLimits, calls: int) -> None:
    """Until `calls` calls of `limits` wait for a permit."""
    while len(limits._waiting) < calls:
        await asyncio.sleep(0.005)


async def test_a_permit_given_back_goes_to_the_oldest_waiting_call_at_once(redis_server: RedisServer) -> None:
    """With one permit held, three calls that queue behind it get it one after the other, in the order
    they came, each as soon as the call before gives it back (well within a poll); none is left over."""
    redis = Redis.from_url(redis_server.url)
    limits = limits_of(redis, concurrency=1)
    order: list[str] = []
    let_go = asyncio.Event()

    async def holder() -> None:
        async with limits.call():
            await let_go.wait()

    async def call(name: str) -> None:
        async with limits.call():
            order.append(name)

    try:
        async with asyncio.timeout(POLL_S / 3):
            holding = asyncio.create_task(holder())
            while not await redis.zcard(keys.llm_permits(limits.provider)):
                await asyncio.sleep(0.005)
            calls = []
            for n, name in enumerate(["a", "b", "c"], start=1):
                calls.append(asyncio.create_task(call(name)))
                await queued(limits, n)
            let_go.set()
            await asyncio.gather(holding, *calls)
            await limits.aclose()
        assert order == ["a", "b", "c"]
        assert await redis.zcard(keys.llm_permits(limits.provider)) == 0
    finally:
        await redis.aclose()


async def test_a_cancelled_waiter_passes_its_turn_on(redis_server: RedisServer) -> None:
    """A waiting call cancelled after it was given its turn, before it could ask, hands the turn to the
    next waiting call, which gets the permit at once. (The permit is held and given back by another
    process, which wakes nobody here; the turn is given as this process's own give-back would.)"""
    redis = Redis.from_url(redis_server.url)
    limits = limits_of(redis, concurrency=1)
    other_process = limits_of(redis, concurrency=1)
    got: list[str] = []

    async def call(name: str) -> None:
        async with limits.call():
            got.append(name)

    try:
        async with asyncio.timeout(POLL_S / 3):
            async with other_process.call():
                first = asyncio.create_task(call("first"))
                await queued(limits, 1)
                second = asyncio.create_task(call("second"))
                await queued(limits, 2)
            await other_process.aclose()  # the permit is free; nobody here was woken
            limits._wake_oldest()  # the first's turn ...
            first.cancel()  # ... and the first cancelled before it could ask
            await asyncio.gather(first, return_exceptions=True)
            await second
            await limits.aclose()
        assert got == ["second"]
    finally:
        await redis.aclose()
