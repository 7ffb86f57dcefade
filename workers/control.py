"""The fleet's controls as one worker process sees them: pause (no run starts) and cancellations.

One watcher per process reads both once per poll, in one round trip, and acts locally: a paused
fleet holds run starts at `wait_runnable`; a cancelled case running here has its task cancelled
(its agents get the grace period) and ends `cancelled`.
"""

from __future__ import annotations

import asyncio

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service import keys

log = structlog.get_logger()


def tuning_of(job_id: str) -> str:
    """The tuning in a case job id (`case:<tuning>:<case>:<rev>`)."""
    return job_id.split(":")[1]


class Controls:
    """Local mirror of the fleet's pause switch, and the cancelling of this process's cases."""

    def __init__(self, redis: Redis, poll_s: float) -> None:
        self._redis = redis
        self._poll_s = poll_s
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self.cancelling: set[str] = set()
        """Job ids whose cancellation this process started (their tasks end as `cancelled`)."""

    @property
    def paused(self) -> bool:
        return not self._unpaused.is_set()

    async def wait_runnable(self) -> None:
        await self._unpaused.wait()

    async def watch(self, running: dict[str, asyncio.Task[object]]) -> None:
        """Every poll: follow the pause switch, and cancel the running cases that were cancelled."""
        while True:
            try:
                await self._tick(running)
            except RedisError as exc:
                log.warning("controls_watch_failed", error=str(exc))
            await asyncio.sleep(self._poll_s)

    async def _tick(self, running: dict[str, asyncio.Task[object]]) -> None:
        tunings = sorted({tuning_of(job_id) for job_id in running if job_id.startswith("case:")})
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.paused())
            for tuning in tunings:
                pipe.smembers(keys.cancelled(tuning))
            paused, *cancelled_sets = await pipe.execute()
        if paused:
            if not self.paused:
                log.info("fleet_paused")
            self._unpaused.clear()
        elif self.paused:
            log.info("fleet_resumed")
            self._unpaused.set()
        cancelled = {member.decode() for members in cancelled_sets for member in members}
        for job_id in cancelled & set(running) - self.cancelling:
            self.cancelling.add(job_id)
            log.info("case_cancelling", job_id=job_id)
            running[job_id].cancel()
