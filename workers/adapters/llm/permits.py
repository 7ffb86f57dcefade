"""A provider's fleet-wide permits (its `concurrency`): a fair semaphore of leased permits in Redis.

- `tf:llm-permits:<provider>`, holder id -> lease expiry (ms): the calls under way.
- `tf:llm-waiters:<provider>`, holder id -> when it first asked (ms): the calls waiting, oldest first.
- `tf:llm-waiting:<provider>`, holder id -> expiry of its wait (ms), renewed at each ask: a waiter
  that stops asking (its worker died) leaves the queue when it lapses.
- channel `tf:llm-grants:<provider>`: the holders a give-back handed a permit to.

A call asks (`ACQUIRE`): it is granted a permit if one is free and no older call waits for it, or if
a give-back handed it one already; else it joins the queue, and the channel carries `!want` to every
worker (once per waiting call). A permit given back (`RELEASE`) goes at once to the oldest call waiting
anywhere in the fleet, which its worker hears on the channel (one subscription per worker and
provider); `RELEASE` answers how many calls still wait. A waiter also asks again at the polls of a
jittered backoff, so a lost message only delays it. A granted call renews its permit every third of
the lease; the permit of a worker that died lapses within the lease, and so does one handed to a
waiter that died. Adaptive concurrency (workers.adapters.llm.limits) lowers the number of permits in
`tf:llm-limits` and says `!cut` on the channel; both scripts read the number, and `ACQUIRE` raises it
again as the recovery time passes.

**A permit kept for the worker's next call.** A call's permit is not given back at once when no call
waits for one anywhere in the fleet: the worker keeps it for KEEP_S, and its next call of the provider
takes it without asking Redis (a round trip less on every call of a busy worker: `bench llm`). The
fleet's count is unchanged (a kept permit is held in Redis, its lease running), and the queue's order
too: a worker keeps none while it may be that a call waits. It gives its kept permits back at once
when it hears `!want` (or `!cut`), and from then on gives back every permit at once, until one of its
give-backs answers that no call waits any more (an answer sent before a later `!want` was heard does
not count). It starts so (at its start, and whenever it could not hear the channel), and keeps none
while a call of its own waits. A permit granted before a cut it heard of is never kept, so a cut holds
from the next calls on, as without keeping.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.io.lua import NOW

log = structlog.get_logger()

KEEP_S = 0.1
"""How long a worker keeps a permit after its call for its next call of the provider, when no call
waits for one: longer than the gap between a busy worker's calls (a run of the demo agent and the
records between two calls of a case: about 10 ms), short beside a call, and far within what is left of
the permit's lease when its call ends (about two thirds of it while the call's renewals, every third,
succeed; a kept permit that lapsed meanwhile is taken again by the next call's renewer, as any)."""
WANTED = "!want"
"""On the grants channel: a call waits for a permit (every kept permit is given back)."""
CUT = "!cut"
"""On the grants channel: the provider's permits were cut (adaptive concurrency)."""
GRANTS_RETRY_S = (0.5, 30.0)
"""The pause before subscribing again to the grants after a fault: doubled from the first up to the
second while the faults go on."""

PRELUDE = f"""
-- KEYS: permits limits waiters waiting
-- ARGV: holder concurrency lease_ms recover_ms provider wait_ms channel
{NOW}
local function permit_limit(recover)
  local limit = tonumber(ARGV[2])
  local raw = redis.call('HGET', KEYS[2], ARGV[5])
  if not raw then return limit end
  local state = cjson.decode(raw)
  if recover and state.limit < limit and now - state.changed_ms >= tonumber(ARGV[4]) then
    state.limit = state.limit + 1
    state.changed_ms = now
    redis.call('HSET', KEYS[2], ARGV[5], cjson.encode(state))
  end
  if state.limit >= limit then
    if recover then redis.call('HDEL', KEYS[2], ARGV[5]) end
    return limit
  end
  return state.limit
end
local function drop_lapsed()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, holder in ipairs(gone) do
    redis.call('ZREM', KEYS[3], holder)
    redis.call('ZREM', KEYS[4], holder)
  end
end
local function grant(holder)
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), holder)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('ZREM', KEYS[3], holder)
  redis.call('ZREM', KEYS[4], holder)
end
"""

ACQUIRE = f"""{PRELUDE}
-- -> 1 granted, 0 waiting (in the queue)
drop_lapsed()
local holder = ARGV[1]
if redis.call('ZSCORE', KEYS[1], holder) then
  grant(holder)
  return 1
end
local free = permit_limit(true) - redis.call('ZCARD', KEYS[1])
if free > 0 then
  local ahead = redis.call('ZRANK', KEYS[3], holder) or redis.call('ZCARD', KEYS[3])
  if ahead < free then
    grant(holder)
    return 1
  end
end
if not redis.call('ZSCORE', KEYS[3], holder) then
  redis.call('ZADD', KEYS[3], now, holder)
  redis.call('PUBLISH', ARGV[7], '{WANTED}')  -- once per waiting call, not at each of its asks
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), holder)
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('PEXPIRE', KEYS[4], ARGV[6])
return 0
"""

RELEASE = f"""{PRELUDE}
-- -> how many calls still wait (after the free permits were handed to the oldest)
local holder = ARGV[1]
redis.call('ZREM', KEYS[1], holder)
redis.call('ZREM', KEYS[3], holder)
redis.call('ZREM', KEYS[4], holder)
drop_lapsed()
local free = permit_limit(false) - redis.call('ZCARD', KEYS[1])
local handed = {{}}
while free > 0 do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head then break end
  grant(head)
  handed[#handed + 1] = head
  free = free - 1
end
if #handed > 0 then redis.call('PUBLISH', ARGV[7], table.concat(handed, ' ')) end
return redis.call('ZCARD', KEYS[3])
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


class FleetPermits:
    """One provider's permits as this worker process takes and gives them back."""

    def __init__(
        self,
        redis: Redis,
        provider: str,
        concurrency: int,
        recover_ms: int,
        lease_ms: int,
        poll_s: tuple[float, float],
        keep_s: float = KEEP_S,
    ) -> None:
        self.provider = provider
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.poll_min_s, self.poll_max_s = poll_s
        self._redis = redis
        self._acquire = redis.register_script(ACQUIRE)
        self._release = redis.register_script(RELEASE)
        self._renew = redis.register_script(RENEW)
        self._keys = [
            keys.llm_permits(provider),
            keys.llm_limits(),
            keys.llm_waiters(provider),
            keys.llm_waiting(provider),
        ]
        wait_ms = int(3000 * self.poll_max_s) + lease_ms  # outlasts the longest gap between asks
        self._argv_tail: list[str | int] = [
            concurrency,
            lease_ms,
            recover_ms,
            provider,
            wait_ms,
            keys.llm_grants(provider),
        ]
        """Every script's arguments after the holder's id (the PRELUDE's ARGV)."""
        self.keep_s = keep_s
        self._waiting: dict[str, asyncio.Future[None]] = {}
        """This process's calls in the queue: holder id -> the future the channel's message settles."""
        self._listener: asyncio.Task[None] | None = None
        self.hearing = False
        """Whether the grants channel is heard now (subscribed): nothing is kept while it is not."""
        self._releasing: set[asyncio.Task[None]] = set()
        self._kept: dict[str, asyncio.TimerHandle] = {}
        """The permits kept for this process's next call: holder id -> the timer that gives it back."""
        self._granted_epoch: dict[str, int] = {}
        """This process's permits (in use or kept): holder id -> the cuts heard before its grant."""
        self.cuts_heard = 0
        """The cuts of the provider's permits heard on the channel (`!cut`) since this process started."""
        self._contended = True
        """Whether a call may be waiting anywhere in the fleet: set by a `!want` or `!cut`, by a call of this
        process that had to wait, and while the channel is not heard; cleared by a give-back's answer that
        no call waits (`_wants_heard` unchanged meanwhile)."""
        self._wants_heard = 0

    def _args(self, holder: str) -> list[str | int]:
        return [holder, *self._argv_tail]

    async def take(self) -> str:
        """A permit for one call (its holder id): one kept by this process at once, else one granted by
        the fleet (`acquire`). Give it back with `give_back`."""
        if self._kept:
            holder, timer = self._kept.popitem()
            timer.cancel()
            return holder
        holder = uuid.uuid4().hex
        await self.acquire(holder)
        self._granted_epoch[holder] = self.cuts_heard
        return holder

    @property
    def keeps(self) -> bool:
        """Whether a permit given back now would be kept (unless granted before a cut): no call may be
        waiting for one anywhere in the fleet, as far as this process heard."""
        return self.keep_s > 0 and self.hearing and not self._contended and not self._waiting

    def give_back(self, holder: str) -> None:
        """After its call: keep the permit for this process's next call (KEEP_S), unless a call may wait
        for one anywhere in the fleet or it was granted before a cut: then give it back at once."""
        if not (self.keeps and self._granted_epoch.get(holder) == self.cuts_heard):
            self.release_soon(holder)
            return
        self._kept[holder] = asyncio.get_running_loop().call_later(self.keep_s, self._unkeep, holder)

    def _unkeep(self, holder: str) -> None:
        self._kept.pop(holder, None)
        self.release_soon(holder)

    def _give_back_kept(self) -> None:
        for holder, timer in list(self._kept.items()):
            timer.cancel()
            self._unkeep(holder)

    async def acquire(self, holder: str) -> None:
        """Wait until `holder` is granted a permit: asked now, then when told it was handed one, or at
        the next poll. Cancelled, it leaves the queue (and gives back a permit handed to it meanwhile)."""
        if self._listener is None:
            self._listener = asyncio.ensure_future(self._listen())
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[holder] = handed
        delay_s = self.poll_min_s
        try:
            while not int(await self._acquire(self._keys, self._args(holder))):
                self._contended = True  # this call waits: the fleet's permits are all taken
                try:
                    async with asyncio.timeout(delay_s * (0.5 + random.random())):
                        await asyncio.shield(handed)
                    return
                except TimeoutError:
                    delay_s = min(delay_s * 2, self.poll_max_s)
        except BaseException:
            self.release_soon(holder)
            raise
        finally:
            del self._waiting[holder]

    async def renew(self, holder: str) -> bool:
        """Renew the permit's lease; False if it had lapsed."""
        return bool(int(await self._renew(self._keys[:1], [holder, self.lease_ms])))

    def release_soon(self, holder: str) -> None:
        """Give the permit back (or leave the queue) in a task of its own: the step goes on meanwhile (the
        permit is held a round trip longer than the call, never shorter); `aclose` waits for it."""
        self._granted_epoch.pop(holder, None)
        task = asyncio.ensure_future(self._let_go(holder))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _let_go(self, holder: str) -> None:
        wants = self._wants_heard
        try:
            waiting = int(await self._release(self._keys, self._args(holder)))
        except RedisError as exc:  # the permit lapses by itself within its lease
            log.warning("llm_permit_release_failed", provider=self.provider, error=str(exc))
            return
        if waiting:
            self._contended = True
        elif wants == self._wants_heard:  # no `!want` came meanwhile: none waits now
            self._contended = False

    async def _listen(self) -> None:
        """Wake this process's waiters that a give-back handed a permit to, for the worker's life; the
        subscription is made again after a fault (the waiters poll meanwhile)."""
        retry_s = GRANTS_RETRY_S[0]
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(keys.llm_grants(self.provider))
                self.hearing = True
                retry_s = GRANTS_RETRY_S[0]
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None:
                        self._wake(message["data"])
            except (RedisError, OSError) as exc:
                log.warning("llm_grants_unheard", provider=self.provider, error=str(exc), retry_s=retry_s)
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, GRANTS_RETRY_S[1])
            finally:
                self._unheard()
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _unheard(self) -> None:
        """The channel is not heard: a `!want` could be missed, so nothing is kept meanwhile (nor after,
        until a give-back says that no call waits)."""
        self.hearing = False
        self._contended = True
        self._give_back_kept()

    def _wake(self, data: bytes | str) -> None:
        """Wake the calls of this process that a grant names (holder ids, space-separated); at `!want` or
        `!cut`, give the kept permits back."""
        for holder in (data.decode() if isinstance(data, bytes) else data).split():
            if holder in (WANTED, CUT):
                self.cuts_heard += holder == CUT
                self._wants_heard += 1
                self._contended = True
                self._give_back_kept()
                continue
            handed = self._waiting.get(holder)
            if handed is not None and not handed.done():
                handed.set_result(None)

    async def aclose(self) -> None:
        """Give the kept permits back, wait for the permits being given back, and stop listening (at the
        worker's shutdown)."""
        self._give_back_kept()
        while self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
