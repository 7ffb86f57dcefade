"""Fleet-wide limits on one LLM provider (a `base_url` and a `model`), kept in Redis.

- `concurrency`: the provider's fleet-wide permits (workers.adapters.llm.permits: a fair queue, a
  permit given back handed at once to the oldest call waiting anywhere in the fleet). A call holds
  its permit for the HTTP call, renewing it every third of PERMIT_LEASE_S, and gives it back
  afterwards, also when cancelled (or keeps it a moment for the worker's next call, while no call
  waits for one anywhere in the fleet).
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
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.io.lua import NOW
from service.core.models.tuning import LlmAdapter
from workers.adapters.llm.permits import CUT, KEEP_S, FleetPermits
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


THROTTLE = f"""
-- KEYS: limits grants ; ARGV: concurrency gap_ms name provider -> the permits now (a cut says CUT on the
-- grants channel: the workers give their kept permits back)
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
redis.call('PUBLISH', KEYS[2], '{CUT}')
return state.limit
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
        keep_s: float = KEEP_S,
    ) -> None:
        self.provider = keys.llm_provider(config.base_url, config.model)
        self.name = f"{config.model} at {config.base_url}"
        self.concurrency = config.concurrency
        self.tokens_per_minute = config.tokens_per_minute
        self.lease_ms = int(lease_s * 1000)
        self._throttle = redis.register_script(THROTTLE)
        self._wait_for_tokens = redis.register_script(WAIT_FOR_TOKENS)
        self._spend = redis.register_script(SPEND)
        self.permits = (
            None
            if self.concurrency is None
            else FleetPermits(
                redis, self.provider, self.concurrency, int(RECOVER_S * 1000), self.lease_ms, poll_s, keep_s
            )
        )

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Wait until the window has room and a permit is granted; hold the permit for the body."""
        began = time.monotonic()
        await self._tokens_room()
        if self.permits is None:
            self._log_wait(began)
            yield
            return
        holder = await self.permits.take()
        self._log_wait(began)
        async with watched(self._keep(self.permits, holder)):
            try:
                yield
            finally:  # given back before the renewer is torn down: the next call waits a loop turn less
                self.permits.give_back(holder)

    async def aclose(self) -> None:
        """Give the kept permits back, wait for the permits being given back, stop listening for grants (at
        the worker's shutdown)."""
        if self.permits is not None:
            await self.permits.aclose()

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
                [keys.llm_limits(), keys.llm_grants(self.provider)],
                [self.concurrency, int(CUT_GAP_S * 1000), self.name, self.provider],
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

    async def _keep(self, permits: FleetPermits, holder: str) -> None:
        """Renew the permit every third of its lease until cancelled."""
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                renewed = await permits.renew(holder)
            except RedisError as exc:
                log.warning("llm_permit_renew_failed", provider=self.provider, error=str(exc))
                continue
            if not renewed:  # it lapsed (Redis unreachable for a lease): take one again, or wait for one
                log.warning("llm_permit_lost", provider=self.provider)
                await permits.acquire(holder)

    def _log_wait(self, began: float) -> None:
        waited_s = time.monotonic() - began
        if waited_s >= POLL_MIN_S:
            log.info("llm_call_waited", provider=self.provider, wait_s=round(waited_s, 3))
