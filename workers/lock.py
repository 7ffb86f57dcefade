"""The improvements lock: one apply at a time per tuning, fleet-wide, with fencing.

Each grant takes a fresh token from the fleet's fence counter. The holder renews its lease while
it works; a new system version becomes current only through PUBLISH, which checks in one atomic
step that the token still holds the lock. An applier that was paused past its lease is refused.
A pending-apply set lets run starts wait for applies under way (`wait_for_apply`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog
from redis.asyncio import Redis

from service.core import keys
from service.core.io.batch import RedisBatch
from service.core.io.lua import NEXT_TOKEN, NOW
from workers.errors import LockLost
from workers.outage import RedisOutage, every
from workers.tasks import watched

log = structlog.get_logger()

ACQUIRE = f"""
-- KEYS: lock fence holder version ; ARGV: lease_ms member -> {{token, the version pointer}} ({{0}}: held)
{NEXT_TOKEN}
if redis.call('EXISTS', KEYS[1]) == 1 then return {{0}} end
local token = next_token(KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[1])
return {{token, redis.call('GET', KEYS[4])}}
"""

RENEW = """
-- KEYS: lock holder ; ARGV: token lease_ms
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

RELEASE = """
-- KEYS: lock holder pending ; ARGV: token member (token '': the lock was never granted)
redis.call('ZREM', KEYS[3], ARGV[2])
if ARGV[1] == '' or redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

PUBLISH = """
-- KEYS: lock version holder pending ; ARGV: token new_version member (member '': the lock stays held)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('DEL', KEYS[1], KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
end
return 1
"""

MARK_PENDING = f"""
-- KEYS: pending ; ARGV: member ttl_ms renew (ttl_ms 0 removes; renew '1' only moves a mark still there: a
-- renewal sent as the apply ends never marks it pending again, nor one whose mark lapsed, its applier paused
-- past the lease, whose runs then no longer wait for it)
{NOW}
if tonumber(ARGV[2]) == 0 then return redis.call('ZREM', KEYS[1], ARGV[1]) end
if ARGV[3] == '1' then return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1]) end
return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
"""

DROP_LAPSED = f"""
local function drop_lapsed(pending)  -- the marks of the pending set `pending` past their expiry (Redis time)
  {NOW}
  redis.call('ZREMRANGEBYSCORE', pending, '-inf', now)
end
"""
"""Defines the Lua function `drop_lapsed(pending)`: a dead applier's mark lapses (PENDING, and the run view
a case's lease reads, workers.lease)."""

PENDING = f"""
-- KEYS: pending ; ARGV: members to look for (none: all) -> the ones still pending
{DROP_LAPSED}
drop_lapsed(KEYS[1])
if #ARGV == 0 then return redis.call('ZRANGE', KEYS[1], 0, -1) end
local still = {{}}
for _, member in ipairs(ARGV) do
  if redis.call('ZSCORE', KEYS[1], member) then table.insert(still, member) end
end
return still
"""


class LockHold:
    """A granted improvements lock: its token, and whether it was lost."""

    def __init__(
        self,
        redis: Redis,
        tuning: str,
        token: int,
        lease_ms: int,
        outage: RedisOutage,
        version: bytes | None = None,
        member: str = "",
        on_released: Callable[[str], None] | None = None,
    ) -> None:
        self._renew = redis.register_script(RENEW)
        self._publish = redis.register_script(PUBLISH)
        self.tuning = tuning
        self.token = token
        self.lease_ms = lease_ms
        self.lost = False
        self.wait_ms = 0
        """How long the holder waited for the lock."""
        self.version_at_grant = version
        """The tuning's version pointer as the lock was granted (read in the same step: no apply can
        have moved it since; None when the pointer was not set yet)."""
        self.published: tuple[str, str] | None = None
        """(the version this hold made current, the version it replaced), once it did."""
        self.released = False
        """Whether the publish let the lock go (`publish(..., release=True)`)."""
        self._member = member
        self._on_released = on_released
        self._outage = outage

    async def renew(self) -> None:
        if self.released:
            return
        ok = await self._renew(
            [keys.lock(self.tuning), keys.lock_holder(self.tuning)], [self.token, self.lease_ms]
        )
        if not ok:
            self.lost = True
            raise LockLost(f"tuning {self.tuning}: improvements lock {self.token} lost")

    async def publish(self, version: str, base: str, release: bool = False) -> None:
        """Make `version` (made on `base`, the current version) current, only if this token still holds
        the lock; else LockLost. `release`: let the lock go (and the apply's pending mark) in the same
        step, for a holder with nothing left to do under it: the next apply and the runs waiting for
        this one go on a round trip sooner."""
        if release and not self._member:
            raise ValueError("a hold granted to no member cannot let go of the lock at its publish")
        member = self._member if release else ""
        publish_keys = [
            keys.lock(self.tuning),
            keys.version(self.tuning),
            keys.lock_holder(self.tuning),
            keys.lock_pending(self.tuning),
        ]
        ok = await self._publish(publish_keys, [self.token, version, member])
        if not ok:
            self.lost = True
            raise LockLost(f"tuning {self.tuning}: publish of {version[:12]} refused, lock {self.token} lost")
        self.published = (version, base)
        if release:
            self.released = True
            if self._on_released is not None:
                self._on_released(self._member)

    async def keep_alive(self) -> None:
        """Renew every third of the lease until cancelled; raises LockLost when refused."""
        interval_s = self.lease_ms / 3000
        await every(interval_s, self.renew, self._outage, "lock_renew", first_s=interval_s, backoff=False)


class ImprovementsLock:
    """The fleet-wide lock of one tuning's system."""

    def __init__(
        self,
        redis: Redis,
        tuning: str,
        lease_s: float,
        poll_s: float = 0.05,
        batch: RedisBatch | None = None,
        outage: RedisOutage | None = None,
    ) -> None:
        self._redis = redis
        self._batch = batch or RedisBatch(redis)
        self._acquire = redis.register_script(ACQUIRE)
        self._release = redis.register_script(RELEASE)
        self._mark = redis.register_script(MARK_PENDING)
        self._pending = redis.register_script(PENDING)
        self.tuning = tuning
        self.lease_ms = int(lease_s * 1000)
        self._poll_s = poll_s
        self._outage = outage or RedisOutage(backoff_max_s=lease_s / 3)
        self._wakers: set[asyncio.Future[bytes]] = set()
        """The waits of this process's jobs (for the lock, for the pending applies to end), woken early
        when one of its own applies ends (and releases the lock): another process's are seen at a poll."""

    def _ended(self, member: str) -> None:
        for waker in self._wakers:
            if not waker.done():
                waker.set_result(member.encode())
        self._wakers.clear()

    async def _nap(self, seconds: float) -> bytes | None:
        """Sleep `seconds`, or less if an apply of this process ends meanwhile: its member, if one did."""
        waker: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._wakers.add(waker)
        try:
            async with asyncio.timeout(seconds):
                return await waker
        except TimeoutError:
            return None
        finally:
            self._wakers.discard(waker)

    async def try_acquire(self, member: str = "") -> LockHold | None:
        """The lock for `member` (the applying job's id, kept beside the lock for status), if it is free."""
        lock_keys = [
            keys.lock(self.tuning),
            keys.fence(),
            keys.lock_holder(self.tuning),
            keys.version(self.tuning),
        ]
        granted = await self._acquire(lock_keys, [self.lease_ms, member])
        if not int(granted[0]):
            return None
        token, version = granted  # the pointer is None (Lua's false) while unset
        return LockHold(
            self._redis, self.tuning, int(token), self.lease_ms, self._outage, version, member, self._ended
        )

    async def release(self, hold: LockHold | None, member: str) -> bool:
        """Take `member` off the pending applies and release its lock, if it holds it, in one step."""
        release_keys = [keys.lock(self.tuning), keys.lock_holder(self.tuning), keys.lock_pending(self.tuning)]
        return bool(await self._release(release_keys, ["" if hold is None else hold.token, member]))

    @asynccontextmanager
    async def held(self, member: str) -> AsyncIterator[LockHold]:
        """Wait for the lock (marked pending meanwhile), hold it with a renewing lease, release it (at the
        block's end, or at its publish: `LockHold.publish`). The pending mark is renewed like a lease, so a
        dead applier's mark lapses on its own."""
        await self._mark_pending(member, self.lease_ms)
        hold: LockHold | None = None
        try:
            async with watched(self._keep_pending(member)):
                hold = await self._wait(member)
                async with watched(hold.keep_alive()):
                    yield hold
        finally:
            if hold is None or not hold.released:  # else let go at its publish
                await asyncio.shield(self.release(hold, member))
                self._ended(member)

    async def _keep_pending(self, member: str) -> None:
        interval_s = self.lease_ms / 3000

        async def renew() -> None:
            await self._mark_pending(member, self.lease_ms, renew=True)

        await every(interval_s, renew, self._outage, "lock_pending_renew", first_s=interval_s, backoff=False)

    async def _wait(self, member: str) -> LockHold:
        began = time.monotonic()
        while True:
            hold = await self.try_acquire(member)
            if hold is not None:
                hold.wait_ms = int((time.monotonic() - began) * 1000)
                return hold
            await self._nap(self._poll_s * (0.5 + random.random()))

    async def _mark_pending(self, member: str, ttl_ms: int, renew: bool = False) -> None:
        await self._mark([keys.lock_pending(self.tuning)], [member, ttl_ms, "1" if renew else "0"])

    async def pending(self, among: list[bytes] | None = None) -> list[bytes]:
        """The applies waiting for or holding the lock (only those of `among`, if given)."""
        if among == []:
            return []
        return list(await self.pending_soon(among or []))

    def pending_soon(self, among: list[bytes]) -> asyncio.Future[list[bytes]]:
        """`pending`'s call queued with this loop turn's other calls (`among` not empty, or all)."""
        return self._batch.queue_script(self._pending, [keys.lock_pending(self.tuning)], among)

    async def wait_idle(self, waiting: list[bytes], max_wait_s: float, poll_s: float) -> float:
        """Wait (at most `max_wait_s`) until the applies `waiting` (pending now) are done; the seconds
        waited. Applies that queue up meanwhile are not waited for, so a busy fleet cannot starve run
        starts. One of this process's that ends is known done without asking Redis."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while waiting and loop.time() - began < max_wait_s:
            ended = await self._nap(min(poll_s, max_wait_s - (loop.time() - began)))
            if ended is not None and ended in waiting:
                waiting = [member for member in waiting if member != ended]
                if not waiting:
                    break
            waiting = await self.pending(waiting)
        return loop.time() - began
