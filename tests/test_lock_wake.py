"""The waits on the improvements lock end when an apply of the same process ends, not at their next poll:
with polls far apart (30 s here), the waits below would each take a whole poll without the wake."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from redis.asyncio import Redis

from service.core.settings import FleetSettings
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
