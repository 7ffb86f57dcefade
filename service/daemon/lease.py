"""One daemon per fleet: a lease on `tf:daemon` that a second daemon on the same Redis is refused by.

Two daemons on one Redis would reconcile, restore and mirror the same tunings at once; every action
is idempotent, but their API ports, counters and pushes would race, and an operator who started a
second one by mistake would never learn. So a daemon takes the lease before it registers anything,
renews it every third of `daemon_lease_s` and gives it back when it stops. A daemon that was killed
blocks the next start for at most `daemon_lease_s`, and the refusal says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from datetime import UTC, datetime

import structlog
from pydantic import BaseModel
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import TunefleetError

log = structlog.get_logger()

RENEW = """
-- KEYS: daemon ; ARGV: holder lease_ms. Renew our lease, take it again if Redis lost it;
-- 0 if another daemon holds it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not current then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
"""

RELEASE = """
-- KEYS: daemon ; ARGV: holder. Give the lease back only if it is still ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class DaemonHolder(BaseModel):
    """The value of `tf:daemon`: who holds the fleet's daemon lease."""

    host: str
    pid: int
    api: str
    since: datetime


class DaemonLockLost(TunefleetError):
    """Another daemon took the lease (this one was frozen longer than `daemon_lease_s`)."""


class DaemonLock:
    """The fleet's daemon lease, held from `acquire` to `release`."""

    def __init__(self, redis: Redis, lease_s: float, api: str) -> None:
        self.redis = redis
        self.lease_ms = int(lease_s * 1000)
        holder = DaemonHolder(host=socket.gethostname(), pid=os.getpid(), api=api, since=datetime.now(UTC))
        self.value = holder.model_dump_json()

    async def acquire(self) -> None:
        """Take the lease, or a TunefleetError naming the daemon that holds it."""
        if await self.redis.set(keys.daemon(), self.value, nx=True, px=self.lease_ms):
            return
        raw, ttl_ms = await asyncio.gather(self.redis.get(keys.daemon()), self.redis.pttl(keys.daemon()))
        raise TunefleetError(f"another daemon serves this fleet's Redis: {describe(raw, ttl_ms)}")

    async def keep(self, stopping: asyncio.Event) -> None:
        """Renew the lease until `stopping` is set; DaemonLockLost (after setting `stopping`) if another
        daemon holds it now. A Redis error is logged once per outage and the renewal tried again."""
        renew = self.redis.register_script(RENEW)
        failing = False
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_ms / 3000):
                    await stopping.wait()
            if stopping.is_set():
                return
            try:
                ours = await renew(keys=[keys.daemon()], args=[self.value, self.lease_ms])
            except (RedisError, OSError) as exc:
                if not failing:
                    log.warning("daemon_lease_renew_failed", error=str(exc))
                failing = True
                continue
            if failing:
                log.info("daemon_lease_renewed")
                failing = False
            if not ours:
                stopping.set()
                raw = await self.redis.get(keys.daemon())
                raise DaemonLockLost(f"this daemon lost its lease to another: {describe(raw, None)}")

    async def release(self) -> None:
        """Give the lease back (if still ours), so that the next daemon starts at once."""
        with contextlib.suppress(RedisError, OSError):
            await self.redis.eval(RELEASE, 1, keys.daemon(), self.value)  # type: ignore[misc]


def describe(raw: bytes | str | None, ttl_ms: int | None) -> str:
    """Who holds the lease, since when, and when it ends if that daemon is gone."""
    if raw is None:
        return "its lease just ended; start again"
    try:
        holder = DaemonHolder.model_validate_json(raw)
    except ValueError:
        return f"an unreadable holder {raw!r}"
    text = f"pid {holder.pid} on {holder.host} (API {holder.api}) since {holder.since:%Y-%m-%d %H:%M:%S} UTC"
    if ttl_ms is not None and ttl_ms > 0:
        text += f"; if it is gone, its lease ends within {ttl_ms / 1000:.1f} s"
    return text
