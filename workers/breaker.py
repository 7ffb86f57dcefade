"""The fleet-wide sandbox circuit breaker, in one Redis hash.

closed → open when a run finds the sandbox unavailable or a probe fails (TRIP, atomic: one trip
per outage). While open, no worker starts a run. One probe at a time across the fleet
(CLAIM_PROBE), on a growing, capped, jittered interval; the first good probe closes it.
Each worker process watches the hash once per poll (BreakerWatch) and gates its cases locally.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Literal

import structlog
from redis.asyncio import Redis

from service.core import keys
from service.core.events import EventSink
from service.core.io.lua import NOW
from service.core.models.events import EventKind
from workers.adapters.base import Prober
from workers.door import Door
from workers.outage import RedisOutage, every

log = structlog.get_logger()

TRIP = f"""
-- KEYS: breaker ; ARGV: reason base_ms tuning
if redis.call('HGET', KEYS[1], 'state') == 'open' then return 0 end
{NOW}
redis.call('HSET', KEYS[1], 'state', 'open', 'opened_ms', now, 'interval_ms', ARGV[2],
  'next_probe_ms', now + tonumber(ARGV[2]), 'probing_until_ms', 0, 'reason', ARGV[1], 'tuning', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'trips', 1)
return 1
"""

CLAIM_PROBE = f"""
-- KEYS: breaker ; ARGV: probe_timeout_ms  -> -1 closed, 0 not now, 1 you probe
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return -1 end
{NOW}
local next_probe = tonumber(redis.call('HGET', KEYS[1], 'next_probe_ms') or '0')
local probing = tonumber(redis.call('HGET', KEYS[1], 'probing_until_ms') or '0')
if now < next_probe or now < probing then return 0 end
redis.call('HSET', KEYS[1], 'probing_until_ms', now + tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[1], 'probes', 1)
return 1
"""

PROBE_RESULT = f"""
-- KEYS: breaker ; ARGV: ok max_ms jitter_ms reason -> 1 closed now, 0 still open
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 1 end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'closed', 'probing_until_ms', 0)
  return 1
end
{NOW}
local interval = math.min(tonumber(redis.call('HGET', KEYS[1], 'interval_ms')) * 2, tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'interval_ms', interval, 'next_probe_ms', now + interval + tonumber(ARGV[3]),
  'probing_until_ms', 0, 'reason', ARGV[4])
return 0
"""

BreakerState = Literal["open", "closed"]


class Breaker:
    """Atomic operations on the breaker hash."""

    def __init__(self, redis: Redis, base_s: float, max_s: float) -> None:
        self._redis = redis
        self._trip = redis.register_script(TRIP)
        self._claim = redis.register_script(CLAIM_PROBE)
        self._result = redis.register_script(PROBE_RESULT)
        self.base_ms = int(base_s * 1000)
        self.max_ms = int(max_s * 1000)

    async def state(self) -> BreakerState:
        value = await self._redis.hget(keys.breaker(), "state")  # type: ignore[misc]
        return "open" if value == b"open" else "closed"

    async def trip(self, reason: str, tuning: str) -> bool:
        """Open the breaker; True if this call opened it."""
        opened = await self._trip([keys.breaker()], [reason, self.base_ms, tuning])
        return bool(opened)

    async def tuning(self) -> str | None:
        """The tuning whose run opened the breaker (its sandbox is the one probed)."""
        value = await self._redis.hget(keys.breaker(), "tuning")  # type: ignore[misc]
        return value.decode() if value else None

    async def claim_probe(self, probe_timeout_s: float) -> int:
        return int(await self._claim([keys.breaker()], [int(probe_timeout_s * 1000)]))

    async def probe_result(self, reason: str | None) -> bool:
        """Record a probe's outcome; True if the breaker is closed now."""
        jitter_ms = random.randint(0, max(1, self.base_ms // 2))
        ok = "1" if reason is None else "0"
        closed = await self._result([keys.breaker()], [ok, self.max_ms, jitter_ms, reason or ""])
        return bool(closed)


class BreakerWatch:
    """One per worker process: mirrors the breaker locally and runs the fleet's probes when it is due."""

    def __init__(
        self,
        breaker: Breaker,
        prober_for: Callable[[str], Awaitable[Prober]],
        sink: EventSink,
        poll_s: float,
        probe_timeout_s: float,
        *,
        outage: RedisOutage | None = None,
    ) -> None:
        self._breaker = breaker
        self._prober_for = prober_for
        self._sink = sink
        self._poll_s = poll_s
        self._probe_timeout_s = probe_timeout_s
        self._outage = outage or RedisOutage(backoff_max_s=poll_s)
        self.runs = Door()
        """Shut while the breaker is open: run starts wait at it."""
        self._reports = 0
        """`report_down` calls so far: a watch answer asked for before the latest one is stale."""

    async def report_down(self, tuning: str, reason: str) -> None:
        """A run found the sandbox unavailable: open the breaker fleet-wide and stop local runs at once."""
        self._reports += 1
        self.runs.shut()
        if await self._breaker.trip(reason, tuning):
            await self._sink.emit(EventKind.BREAKER_OPENED, tuning, detail=reason)

    async def watch(self) -> None:
        """Follow the breaker every poll until cancelled; probe when this process wins the claim."""
        await every(self._poll_s, self._tick, self._outage, "breaker_watch")

    async def _tick(self) -> None:
        reports = self._reports
        claim = await self._breaker.claim_probe(self._probe_timeout_s)
        if claim == -1:
            # Closed in Redis, unless a run reported the sandbox down while the claim was on its way (its
            # trip may land after the claim): then the next tick decides, and the runs wait meanwhile.
            if reports == self._reports:
                self.runs.open()
            return
        self.runs.shut()
        if claim == 1:
            tuning = await self._breaker.tuning() or "unknown"
            prober = await self._prober_for(tuning)
            reason = await prober.probe()
            closed = await self._breaker.probe_result(reason)
            await self._sink.emit(
                EventKind.BREAKER_PROBED, tuning, detail=reason or "sandbox works", data={"closed": closed}
            )
            if closed:
                try:  # recorded before the held runs go on (released even if the event cannot be sent)
                    await self._sink.emit(EventKind.BREAKER_CLOSED, tuning)
                finally:
                    self.runs.open()
