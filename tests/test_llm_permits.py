"""A provider's fleet-wide permits (workers.adapters.llm.permits) are handed on fairly and at once: a permit
given back goes to the oldest call waiting anywhere in the fleet, which its process hears on the grants
channel; a permit a process keeps for its next call goes back as soon as a call waits elsewhere. Each
"process" here is a ProviderLimits with a Redis connection of its own, against a real redis-server; polls
are 30 s apart, so without the hand-off every wait below would last a whole poll."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from service.core import keys
from service.core.models.tuning import LlmAdapter
from tests.support.redis_server import RedisServer
from workers.adapters.llm.limits import PERMIT_LEASE_S, ProviderLimits
from workers.adapters.llm.permits import KEEP_S

POLL_S = 30.0
BASE_URL = "http://127.0.0.1:9/v1"
MODEL = "permits-model"
PROVIDER = keys.llm_provider(BASE_URL, MODEL)

Process = Callable[..., ProviderLimits]


@pytest.fixture
async def process(redis_server: RedisServer) -> AsyncIterator[Process]:
    """Makes the limits of one provider (concurrency 1) as a new worker process would, each with a Redis
    connection of its own; closes them all afterwards."""
    made: list[tuple[Redis, ProviderLimits]] = []

    def new(keep_s: float = KEEP_S, lease_s: float = PERMIT_LEASE_S, concurrency: int = 1) -> ProviderLimits:
        """A process whose calls keep their permit `keep_s` for its next call (the workers' own by default;
        0: given back at once)."""
        redis = Redis.from_url(redis_server.url)
        config = LlmAdapter(
            kind="llm", base_url=BASE_URL, model=MODEL, api_key_env=None, concurrency=concurrency
        )
        limits = ProviderLimits(redis, config, lease_s, poll_s=(POLL_S, POLL_S), keep_s=keep_s)
        made.append((redis, limits))
        return limits

    yield new
    for redis, limits in made:
        await limits.aclose()
        await redis.aclose()


def waiting(redis_server: RedisServer) -> list[str]:
    """The fleet's queue for the provider's permits, oldest first."""
    with redis_server.client() as redis:
        return [member.decode() for member in redis.zrange(keys.llm_waiters(PROVIDER), 0, -1)]


def permits_held(redis_server: RedisServer) -> int:
    return redis_server.zcard(keys.llm_permits(PROVIDER))


async def queued(redis_server: RedisServer, calls: int) -> None:
    """Until `calls` calls wait in the fleet's queue."""
    while len(waiting(redis_server)) < calls:
        await asyncio.sleep(0.005)


class Calls:
    """Calls of the provider, each noting its name in `order` once it holds its permit."""

    def __init__(self) -> None:
        self.order: list[str] = []

    async def call(self, limits: ProviderLimits, name: str, let_go: asyncio.Event | None = None) -> None:
        async with limits.call():
            self.order.append(name)
            if let_go is not None:
                await let_go.wait()

    def start(
        self, limits: ProviderLimits, name: str, let_go: asyncio.Event | None = None
    ) -> asyncio.Task[None]:
        return asyncio.create_task(self.call(limits, name, let_go))

    async def holding(self, limits: ProviderLimits, name: str, let_go: asyncio.Event) -> asyncio.Task[None]:
        """A call started and holding the permit."""
        task = self.start(limits, name, let_go)
        while name not in self.order:
            await asyncio.sleep(0.005)
        return task


async def test_a_permit_given_back_goes_to_the_oldest_call_waiting_in_the_fleet_at_once(
    process: Process, redis_server: RedisServer
) -> None:
    """Calls of two processes that queue behind the one permit get it in the order they came, each as
    soon as the call before gives it back, whichever process gives it and whichever waits; nothing is
    left in Redis afterwards."""
    first, second = process(), process()
    calls = Calls()
    let_go = asyncio.Event()
    async with asyncio.timeout(POLL_S / 3):
        holder = await calls.holding(first, "holder", let_go)
        waiters = []
        for n, (limits, name) in enumerate([(second, "a"), (first, "b"), (second, "c")], start=1):
            waiters.append(calls.start(limits, name))
            await queued(redis_server, n)
        let_go.set()
        await asyncio.gather(holder, *waiters)
        await first.aclose()
        await second.aclose()
    assert calls.order == ["holder", "a", "b", "c"]
    assert waiting(redis_server) == [] and permits_held(redis_server) == 0


async def test_a_call_cancelled_while_it_waits_leaves_the_queue(
    process: Process, redis_server: RedisServer
) -> None:
    """A waiting call that is cancelled (its step stopped) leaves the fleet's queue at once, and the permit
    given back later goes to the call behind it."""
    first, second = process(), process()
    calls = Calls()
    let_go = asyncio.Event()
    async with asyncio.timeout(POLL_S / 3):
        holder = await calls.holding(first, "holder", let_go)
        gone = calls.start(second, "gone")
        await queued(redis_server, 1)
        behind = calls.start(first, "behind")
        await queued(redis_server, 2)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        while len(waiting(redis_server)) != 1:
            await asyncio.sleep(0.005)
        let_go.set()
        await asyncio.gather(holder, behind)
        await first.aclose()
        await second.aclose()
    assert calls.order == ["holder", "behind"]
    assert waiting(redis_server) == [] and permits_held(redis_server) == 0


async def test_a_waiter_whose_worker_died_is_passed_over(process: Process, redis_server: RedisServer) -> None:
    """A call at the head of the queue that stops asking (its worker died) is dropped once its wait lapses,
    when the permit is given back: the permit goes to the live call behind it."""
    limits = process()
    calls = Calls()
    let_go = asyncio.Event()
    async with asyncio.timeout(POLL_S / 3):
        holder = await calls.holding(limits, "holder", let_go)
        lapses_ms = redis_ms(redis_server) + 300
        with redis_server.client() as redis:
            redis.zadd(keys.llm_waiters(PROVIDER), {"dead": lapses_ms - 60_000})
            redis.zadd(keys.llm_waiting(PROVIDER), {"dead": lapses_ms})
        live = calls.start(limits, "live")
        await queued(redis_server, 2)
        assert waiting(redis_server)[0] == "dead"
        while redis_ms(redis_server) <= lapses_ms:  # the dead call's wait lapses (by Redis's clock)
            await asyncio.sleep(0.01)
        let_go.set()
        await asyncio.gather(holder, live)
        await limits.aclose()
    assert calls.order == ["holder", "live"]
    assert waiting(redis_server) == [] and permits_held(redis_server) == 0


def redis_ms(redis_server: RedisServer) -> int:
    with redis_server.client() as redis:
        seconds, micros = redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_a_worker_that_lost_its_subscription_hears_the_grants_again(
    process: Process, redis_server: RedisServer
) -> None:
    """Redis drops the worker's subscription to the grants (CLIENT KILL TYPE pubsub): the worker subscribes
    again, and a permit given back afterwards still reaches its waiting call at once, not at a poll."""
    limits = process()
    calls = Calls()
    let_go = asyncio.Event()
    channel = keys.llm_grants(PROVIDER)
    async with asyncio.timeout(POLL_S / 3):
        holder = await calls.holding(limits, "holder", let_go)
        waiter = calls.start(limits, "waiter")
        await queued(redis_server, 1)
        await until_subscribers(redis_server, channel, 1)
        with redis_server.client() as redis:
            assert redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        await until_subscribers(redis_server, channel, 0)
        await until_subscribers(redis_server, channel, 1)
        let_go.set()
        await asyncio.gather(holder, waiter)
        await limits.aclose()
    assert calls.order == ["holder", "waiter"]


async def until_subscribers(redis_server: RedisServer, channel: str, count: int) -> None:
    """Until `count` connections subscribe to `channel`."""
    while True:
        with redis_server.client() as redis:
            [(_, subscribers)] = redis.pubsub_numsub(channel)
        if subscribers == count:
            return
        await asyncio.sleep(0.01)


def holders(redis_server: RedisServer) -> list[str]:
    """The holder ids of the provider's permits held now (in use or kept)."""
    return redis_server.zmembers(keys.llm_permits(PROVIDER))


async def hearing(limits: ProviderLimits) -> None:
    """Until the process hears the grants channel (it subscribes at its first call)."""
    assert limits.permits is not None
    while not limits.permits.hearing:
        await asyncio.sleep(0.005)


async def keeping(limits: ProviderLimits, calls: Calls) -> None:
    """Until the process keeps permits: it starts as if a call might wait somewhere, and learns that none
    does from the answer to its first give-back (of a call made here)."""
    assert limits.permits is not None
    await calls.call(limits, "learns")
    while not limits.permits.keeps:
        await asyncio.sleep(0.005)


async def test_a_process_keeps_its_permit_for_its_next_call_and_gives_it_back_when_idle(
    process: Process, redis_server: RedisServer
) -> None:
    """With no call waiting anywhere, a call's permit stays with its process after the call, and the
    process's next call takes that very permit (the same holder in Redis, no new grant); a permit kept
    past `keep_s` idle is given back, and so is one kept at the process's close."""
    keeping_one = process(keep_s=POLL_S)
    calls = Calls()
    async with asyncio.timeout(POLL_S / 3):
        await keeping(keeping_one, calls)
        await calls.call(keeping_one, "first")
        [kept] = holders(redis_server)
        let_go = asyncio.Event()
        second = await calls.holding(keeping_one, "second", let_go)
        assert holders(redis_server) == [kept]
        let_go.set()
        await second
        assert holders(redis_server) == [kept]
        await keeping_one.aclose()
        assert permits_held(redis_server) == 0
        brief = process(keep_s=0.05)
        await keeping(brief, calls)
        await calls.call(brief, "brief")
        while permits_held(redis_server):  # given back once idle for 50 ms, without a close
            await asyncio.sleep(0.01)
    assert calls.order == ["learns", "first", "second", "learns", "brief"]


async def test_a_kept_permit_goes_at_once_to_a_call_of_another_process(
    process: Process, redis_server: RedisServer
) -> None:
    """A process keeps its permit (for 30 s); a call of another process that asks for one is heard
    waiting (`!want`) and gets it at once, not after the keep nor at its 30 s poll."""
    keeping_one, other = process(keep_s=POLL_S), process(keep_s=POLL_S)
    calls = Calls()
    async with asyncio.timeout(POLL_S / 3):
        await calls.call(other, "hears")  # subscribed to the grants before it waits for one
        await hearing(other)
        while permits_held(redis_server):  # its permit given back (it did not know yet that none waits)
            await asyncio.sleep(0.005)
        await keeping(keeping_one, calls)
        await calls.call(keeping_one, "kept")
        assert permits_held(redis_server) == 1
        let_go = asyncio.Event()
        waiter = await calls.holding(other, "other", let_go)
        assert permits_held(redis_server) == 1  # the kept one was given back, then granted to `other`
        let_go.set()
        await waiter
    assert calls.order == ["hears", "learns", "kept", "other"]


async def test_a_cut_of_the_permits_gives_the_kept_ones_back_and_keeps_none_granted_before_it(
    process: Process, redis_server: RedisServer
) -> None:
    """Adaptive concurrency cuts the permits (a 429 in another process): a process gives back the permit
    it kept; the permit of a call under way at a cut is given back when that call ends, not kept, also
    when the process keeps permits again by then (another call's give-back answered that none waits), so
    the cut holds from the next calls on. (Leases of 30 s: no permit lapses meanwhile.)"""
    keeping_one = process(keep_s=POLL_S, lease_s=POLL_S, concurrency=2)
    throttled = process(keep_s=0, lease_s=POLL_S, concurrency=2)
    assert keeping_one.permits is not None
    calls = Calls()
    async with asyncio.timeout(POLL_S / 3):
        await keeping(keeping_one, calls)
        await calls.call(keeping_one, "kept")
        assert permits_held(redis_server) == 1
        await throttled.throttled()
        while permits_held(redis_server):  # the kept permit goes back at the cut
            await asyncio.sleep(0.01)
        before, after = asyncio.Event(), asyncio.Event()
        during = await calls.holding(keeping_one, "granted before the cut", before)
        with redis_server.client() as redis:  # as if the permits had recovered: the next 429 cuts again
            redis.hdel(keys.llm_limits(), PROVIDER)
        await throttled.throttled()
        while keeping_one.permits.cuts_heard < 2:
            await asyncio.sleep(0.005)
        with redis_server.client() as redis:  # recovered again: a second call may go
            redis.hdel(keys.llm_limits(), PROVIDER)
        since = await calls.holding(keeping_one, "granted after it", after)
        after.set()
        await since  # its give-back answers that no call waits: the process keeps permits again
        while not keeping_one.permits.keeps:
            await asyncio.sleep(0.005)
        assert permits_held(redis_server) == 1
        before.set()
        await during
        while permits_held(redis_server):  # given back at once, not kept for 30 s
            await asyncio.sleep(0.01)
    assert calls.order == ["learns", "kept", "granted before the cut", "granted after it"]
