"""One worker process's view of whether Redis answers, and the periodic tasks that live with it.

Every periodic task of a worker (the poll, the controls and breaker watches, the presence, the lease
heartbeats, the lock renewals) reports each Redis call's outcome here. The first failure of an outage
is logged once (`redis_unreachable`, naming the task that met it), the first answer after it once
(`redis_reachable`, with the outage's length); in between, the tasks that may wait back off, and
those that listen (`on_answer`: the poll) are told when it ends.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import structlog
from redis.exceptions import RedisError

log = structlog.get_logger()


class RedisOutage:
    """Whether Redis is down as this process last saw it; logs each outage's start and end once."""

    def __init__(self, backoff_max_s: float) -> None:
        self.backoff_max_s = backoff_max_s
        self._since: float | None = None
        self.outages = 0
        self._listeners: list[Callable[[], object]] = []

    def on_answer(self, listener: Callable[[], object]) -> None:
        """Call `listener` whenever an outage ends (a task backing off can stop waiting)."""
        self._listeners.append(listener)

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, task: str, exc: RedisError) -> None:
        if self._since is None:
            self._since = time.monotonic()
            self.outages += 1
            log.warning("redis_unreachable", task=task, error=str(exc))

    def answered(self) -> None:
        if self._since is not None:
            down_s = time.monotonic() - self._since
            self._since = None
            log.info("redis_reachable", down_s=round(down_s, 1))
            for listener in self._listeners:
                listener()

    def wait_s(self, interval_s: float, failures: int) -> float:
        """The wait before a task's next try: its interval while Redis answers; after `failures` failed
        tries in a row, the interval doubled per failure, capped at `backoff_max_s`, with jitter."""
        if failures == 0:
            return interval_s
        grown_s = min(self.backoff_max_s, interval_s * (1 << min(failures, 16)))
        return max(interval_s, grown_s * (0.75 + random.random() / 2))


async def every(
    interval_s: float,
    tick: Callable[[], Awaitable[object]],
    outage: RedisOutage,
    task: str,
    *,
    first_s: float = 0.0,
    backoff: bool = True,
) -> None:
    """Run `tick` every `interval_s` (the first after `first_s`) until cancelled; a RedisError is
    reported to `outage`, and the next try backs off (unless `backoff` is off: a lease renewal keeps
    its pace, or the lease would lapse for want of a try)."""
    await asyncio.sleep(first_s)
    failures = 0
    while True:
        try:
            await tick()
        except RedisError as exc:
            outage.failed(task, exc)
            failures += 1
        else:
            outage.answered()
            failures = 0
        await asyncio.sleep(outage.wait_s(interval_s, failures if backoff else 0))
