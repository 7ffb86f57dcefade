"""The waits on the improvements lock end when an apply of the same process ends, not at their next poll:
with polls far apart (30 s here), the waits below would each take a whole poll without the wake. An apply
that fails under the lock ends too: it leaves neither the lock nor its pending mark behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from redis.asyncio import Redis

from service.core import keys
from service.core.settings import FleetSettings
from workers.errors import LeaseLost
from workers.lock import ImprovementsLock

POLL_S = 30.0
T = TypeVar("T")


async def _waits_out_an_apply(lock: ImprovementsLock, wait: Awaitable[T]) -> T:
    """Hold the lock as an apply ("job-1") would, start `wait` once it holds it, let go once `wait` has
    found the apply under way and sleeps until its next poll; what `wait` returned (within a third of
    a poll)."""
    holds = asyncio.Event()
    let_go = asyncio.Event()

    async def apply() -> None:
        async with lock.held("job-1"):
            holds.set()
            await let_go.wait()

    applying = asyncio.create_task(apply())
    await holds.wait()
    waiting = asyncio.ensure_future(wait)
    while not lock._wakers:  # the wait saw the apply and sleeps
        await asyncio.sleep(0.01)
    let_go.set()
    async with asyncio.timeout(POLL_S / 3):
        await applying
        return await waiting


async def test_a_lock_waiter_gets_the_lock_as_soon_as_the_process_s_holder_releases_it(
    settings: FleetSettings,
) -> None:
    """A second apply waiting for the lock is granted it when the first one of its process leaves the
    lock, although its poll would only come 15 to 45 s later."""
    redis = Redis.from_url(settings.redis_url)
    lock = ImprovementsLock(redis, "t1", lease_s=60.0, poll_s=POLL_S)

    async def second() -> int:
        async with lock.held("job-2") as hold:
            return hold.wait_ms

    try:
        assert await _waits_out_an_apply(lock, second()) < POLL_S * 1000 / 3
    finally:
        await redis.aclose()


async def test_a_run_start_waiting_for_the_applies_goes_on_as_soon_as_they_end(
    settings: FleetSettings,
) -> None:
    """`wait_idle` (a run start under `wait_for_apply`) returns when the pending apply of its process
    ends, not at its next poll."""
    redis = Redis.from_url(settings.redis_url)
    lock = ImprovementsLock(redis, "t1", lease_s=60.0)

    async def run_start() -> float:
        pending = await lock.pending()
        assert pending == [b"job-1"]
        return await lock.wait_idle(pending, max_wait_s=10 * POLL_S, poll_s=POLL_S)

    try:
        waited_s = await _waits_out_an_apply(lock, run_start())
        assert waited_s < POLL_S / 3
        assert await lock.pending() == []
    finally:
        await redis.aclose()


async def test_a_publish_that_releases_lets_the_next_apply_and_the_runs_go_before_its_block_ends(
    settings: FleetSettings,
) -> None:
    """`publish(release=True)` makes the version current, lets the lock and the apply's pending mark go in
    one step, and wakes the process's waits: a run start waiting for the apply goes on and another apply
    is granted the lock (on the new version) while the publisher's block is still open; a pending-mark
    renewal sent after it marks nothing, and the block's end leaves the next holder's lock alone."""
    redis = Redis.from_url(settings.redis_url)
    lock = ImprovementsLock(redis, "t1", lease_s=60.0, poll_s=POLL_S)
    holds = asyncio.Event()
    publish = asyncio.Event()
    published = asyncio.Event()
    let_go = asyncio.Event()

    async def apply() -> None:
        async with lock.held("job-1") as hold:
            holds.set()
            await publish.wait()
            await hold.publish("v2", base="v1", release=True)
            published.set()
            await let_go.wait()

    try:
        applying = asyncio.create_task(apply())
        await holds.wait()
        run_start = asyncio.ensure_future(lock.wait_idle([b"job-1"], max_wait_s=10 * POLL_S, poll_s=POLL_S))
        while not lock._wakers:  # the run start saw the apply pending and sleeps until its next poll
            await asyncio.sleep(0.01)
        publish.set()
        async with asyncio.timeout(POLL_S / 3):
            assert await run_start < POLL_S / 3  # woken by the publish, the block still open
        assert published.is_set() and not applying.done()
        assert await redis.get(keys.version("t1")) == b"v2"
        assert await lock.pending() == []
        await lock._mark_pending("job-1", 60_000, renew=True)  # a renewal that crossed the publish
        assert await lock.pending() == []
        second = await lock.try_acquire("job-2")
        assert second is not None and second.version_at_grant == b"v2"
        let_go.set()
        await applying
        assert await redis.get(keys.lock("t1")) == str(second.token).encode()
    finally:
        await redis.aclose()


async def test_a_block_that_raises_lets_the_lock_and_its_pending_mark_go(settings: FleetSettings) -> None:
    """An apply whose block raises while it holds the lock (as a grade whose landing the fence refuses
    does, workers.steps.apply) lets the lock go and leaves the applies pending: the next apply is granted
    the lock at once, and a run start no longer waits for the one that failed."""
    redis = Redis.from_url(settings.redis_url)
    lock = ImprovementsLock(redis, "t1", lease_s=60.0, poll_s=POLL_S)
    try:
        with pytest.raises(LeaseLost):
            async with lock.held("job-1"):
                assert await lock.pending() == [b"job-1"]
                raise LeaseLost("the grade's landing was refused")
        assert await redis.get(keys.lock("t1")) is None
        assert await lock.pending() == []
        assert await lock.try_acquire("job-2") is not None
    finally:
        await redis.aclose()
