"""Fleet-wide limits on one LLM provider (a `base_url` and a `model`), kept in Redis.

- `concurrency`: a semaphore of leased permits, a sorted set of holder ids scored by their expiry
  (`tf:llm-permits:<provider>`). A call waits, polling with a jittered backoff, until `ACQUIRE`
  grants it a permit (expired holders are dropped first), renews the permit every third of
  PERMIT_LEASE_S while the call runs, and releases it afterwards, also when cancelled (in a task of its
  own, so that the step does not wait for that round trip). The permit of a worker that died lapses
  within PERMIT_LEASE_S. A permit given back wakes the oldest call of the same process that waits
  for one (which asks at once); another process's calls find it at their next poll.
- Adaptive concurrency: a 429 halves the permits fleet-wide (`THROTTLE`, at most once per CUT_GAP_S,
  down to one), kept in the provider's field of `tf:llm-limits`; every RECOVER_S without a 429 gives
  one back (`ACQUIRE`), until the configured `concurrency` is reached and the field goes. `tunefleet status`
  shows a provider while it runs below its configuration.
- `tokens_per_minute`: a sliding window (`tf:llm-tokens:<provider>`): every completion's tokens are
  added with the time, and a call waits until the last minute's tokens are under the limit.

Every time is Redis's `TIME`, so the fleet's machines need no common clock.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.lua import NOW
from service.core.models.tuning import LlmAdapter
from workers.tasks import watched

log = structlog.get_logger()

PERMIT_LEASE_S = 3.0
"""A permit's lease, renewed every third of it while the call runs."""
WINDOW_MS = 60_000
"""The tokens-per-minute window."""
CUT_GAP_S = 2.0
"""A burst of 429s (every call under way answered one) halves the permits once, not once per call."""
RECOVER_S = 10.0
"""The permits come back one at a time, one per this many seconds without a 429."""
POLL_MIN_S = 0.05
POLL_MAX_S = 1.0
"""The backoff between two tries for a permit, or two looks at the window: doubled up to the max."""

ACQUIRE = f"""
-- KEYS: permits limits ; ARGV: holder concurrency lease_ms recover_ms provider -> 1 granted, 0 not now
{NOW}
local limit = tonumber(ARGV[2])
local raw = redis.call('HGET', KEYS[2], ARGV[5])
if raw then
  local state = cjson.decode(raw)
  if state.limit < limit and now - state.changed_ms >= tonumber(ARGV[4]) then
    state.limit = state.limit + 1
    state.changed_ms = now
    redis.call('HSET', KEYS[2], ARGV[5], cjson.encode(state))
  end
  if state.limit >= limit then
    redis.call('HDEL', KEYS[2], ARGV[5])
  else
    limit = state.limit
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
"""

THROTTLE = f"""
-- KEYS: limits ; ARGV: concurrency gap_ms name provider -> the permits now
{NOW}
local raw = redis.call('HGET', KEYS[1], ARGV[4])
local state = {{limit = tonumber(ARGV[1]), changed_ms = 0, cuts = 0}}
if raw then state = cjson.decode(raw) end
if now - state.changed_ms < tonumber(ARGV[2]) then return state.limit end
state.limit = math.max(1, math.floor(state.limit / 2))
state.max = tonumber(ARGV[1])
state.changed_ms = now
state.cuts = state.cuts + 1
state.name = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[4], cjson.encode(state))
return state.limit
"""

RENEW = f"""
-- KEYS: permits ; ARGV: holder lease_ms -> 1 renewed, 0 lost (it expired)
{NOW}
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) < now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

RELEASE = """
-- KEYS: permits ; ARGV: holder
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

WAIT_FOR_TOKENS = f"""
-- KEYS: tokens ; ARGV: window_ms limit -> 0 when the window's tokens are under the limit, else the
-- milliseconds until enough of them have left it
{NOW}
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local total = 0
for i = 1, #entries, 2 do
  total = total + tonumber(string.match(entries[i], ':(%d+)$'))
end
if total < limit then return 0 end
for i = 1, #entries, 2 do
  total = total - tonumber(string.match(entries[i], ':(%d+)$'))
  if total < limit then return math.max(1, tonumber(entries[i + 1]) + window - now) end
end
return 1
"""

SPEND = f"""
-- KEYS: tokens ; ARGV: call_id tokens window_ms
{NOW}
redis.call('ZADD', KEYS[1], now, ARGV[1] .. ':' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class ProviderLimits:
    """The fleet-wide limits of one provider: `async with limits.call():` around each HTTP call, then
    `await limits.spend(tokens)` with its usage. A limit that is unset costs no Redis round trip."""

    def __init__(
        self,
        redis: Redis,
        config: LlmAdapter,
        lease_s: float = PERMIT_LEASE_S,
        poll_s: tuple[float, float] = (POLL_MIN_S, POLL_MAX_S),
    ) -> None:
        self.provider = keys.llm_provider(config.base_url, config.model)
        self.name = f"{config.model} at {config.base_url}"
        self.concurrency = config.concurrency
        self.tokens_per_minute = config.tokens_per_minute
        self.lease_ms = int(lease_s * 1000)
        self.poll_min_s, self.poll_max_s = poll_s
        self._acquire = redis.register_script(ACQUIRE)
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)
        self._throttle = redis.register_script(THROTTLE)
        self._wait_for_tokens = redis.register_script(WAIT_FOR_TOKENS)
        self._spend = redis.register_script(SPEND)
        self._releasing: set[asyncio.Task[None]] = set()
        self._waiting: dict[asyncio.Future[None], int] = {}
        """This process's calls waiting for a permit: the future that wakes each, and its ticket (its
        arrival: the lowest is the oldest)."""
        self._tickets = itertools.count()

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Wait until the window has room and a permit is granted; hold the permit for the body."""
        began = time.monotonic()
        await self._tokens_room()
        if self.concurrency is None:
            self._log_wait(began)
            yield
            return
        holder = uuid.uuid4().hex
        await self._permit(holder, self.concurrency)
        self._log_wait(began)
        try:
            async with watched(self._keep(holder)):
                yield
        finally:
            self._release_soon(holder)

    def _release_soon(self, holder: str) -> None:
        """Give the permit back in a task of its own: the step goes on with its answer meanwhile (the
        permit is held a round trip longer than the call, never shorter); `aclose` waits for it."""
        task = asyncio.ensure_future(self._let_go(holder))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def aclose(self) -> None:
        """Wait for the permits being given back (at the worker's shutdown)."""
        while self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

    async def spend(self, tokens: int) -> None:
        """Add a completion's tokens to the window (a Redis fault is logged: the call is paid already)."""
        if self.tokens_per_minute is None or tokens <= 0:
            return
        try:
            await self._spend([keys.llm_tokens(self.provider)], [uuid.uuid4().hex, tokens, WINDOW_MS])
        except RedisError as exc:
            log.warning("llm_tokens_not_counted", provider=self.provider, tokens=tokens, error=str(exc))

    async def throttled(self) -> None:
        """The provider answered 429: halve the fleet's permits (adaptive concurrency), if it has any."""
        if self.concurrency is None:
            return
        try:
            limit = await self._throttle(
                [keys.llm_limits()], [self.concurrency, int(CUT_GAP_S * 1000), self.name, self.provider]
            )
        except RedisError as exc:
            log.warning("llm_throttle_not_kept", provider=self.provider, error=str(exc))
            return
        log.info("llm_concurrency_cut", provider=self.provider, limit=int(limit), of=self.concurrency)

    async def _tokens_room(self) -> None:
        if self.tokens_per_minute is None:
            return
        window = keys.llm_tokens(self.provider)
        while True:
            wait_ms = int(await self._wait_for_tokens([window], [WINDOW_MS, self.tokens_per_minute]))
            if wait_ms == 0:
                return
            await asyncio.sleep(min(wait_ms / 1000, POLL_MAX_S) * (0.5 + random.random() / 2))

    async def _permit(self, holder: str, limit: int) -> None:
        """Wait for a permit: ask, and ask again when this process gives one back to this call (the
        oldest waiting) or at the next poll of a jittered backoff."""
        permits = [keys.llm_permits(self.provider), keys.llm_limits()]
        args: list[str | int] = [holder, limit, self.lease_ms, int(RECOVER_S * 1000), self.provider]
        ticket = next(self._tickets)
        delay_s = self.poll_min_s
        try:
            while not int(await self._acquire(permits, args)):
                turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiting[turn] = ticket
                try:
                    async with asyncio.timeout(delay_s * (0.5 + random.random())):
                        await turn
                except TimeoutError:
                    delay_s = min(delay_s * 2, self.poll_max_s)
                finally:
                    self._waiting.pop(turn, None)
        except BaseException:
            self._wake_oldest()  # the turn this call may have been given goes on to the next
            raise

    def _wake_oldest(self) -> None:
        """Give the oldest call of this process still waiting for a permit its turn to ask."""
        waiting = [turn for turn in self._waiting if not turn.done()]
        if waiting:
            oldest = min(waiting, key=self._waiting.__getitem__)
            del self._waiting[oldest]
            oldest.set_result(None)

    async def _keep(self, holder: str) -> None:
        """Renew the permit every third of its lease until cancelled."""
        permits = keys.llm_permits(self.provider)
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                renewed = int(await self._renew([permits], [holder, self.lease_ms]))
            except RedisError as exc:
                log.warning("llm_permit_renew_failed", provider=self.provider, error=str(exc))
                continue
            if not renewed:  # it lapsed (Redis unreachable for a lease): take one again, or wait for one
                log.warning("llm_permit_lost", provider=self.provider)
                await self._permit(holder, self.concurrency or 1)

    async def _let_go(self, holder: str) -> None:
        try:
            await self._release([keys.llm_permits(self.provider)], [holder])
        except RedisError as exc:  # the permit lapses by itself within its lease
            log.warning("llm_permit_release_failed", provider=self.provider, error=str(exc))
            return
        self._wake_oldest()

    def _log_wait(self, began: float) -> None:
        waited_s = time.monotonic() - began
        if waited_s >= POLL_MIN_S:
            log.info("llm_call_waited", provider=self.provider, wait_s=round(waited_s, 3))
