"""The fleet's controls as one worker process sees them: pause (no run starts), per-tuning holds
(no run of that tuning starts) and cancellations.

One watcher per process reads them once per poll, in one round trip, and acts locally: a paused
fleet holds run starts at `wait_runnable`, a held tuning at `wait_released`; a cancelled case
running here has its task cancelled (its agents get the grace period) and ends `cancelled`.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import structlog
from redis.asyncio import Redis

from service.core import keys
from service.core.models.status import Hold
from workers.door import Door
from workers.outage import RedisOutage, every

log = structlog.get_logger()


class Controls:
    """Local mirror of the fleet's pause switch and tuning holds, and the cancelling of this process's
    cases."""

    def __init__(self, redis: Redis, poll_s: float, outage: RedisOutage | None = None) -> None:
        self._redis = redis
        self._poll_s = poll_s
        self._outage = outage or RedisOutage(backoff_max_s=poll_s)
        self.runs = Door()
        """Shut while the fleet is paused: run starts wait at it."""
        self.cancelling: set[str] = set()
        """Job ids whose cancellation this process started (their tasks end as `cancelled`), until they
        leave the running jobs: a job is cancelled once, so that a poll during its slow ending (a write
        on a loaded disk) does not cancel the ending itself and hand the job back half-ended."""
        self.scopes: dict[str, str] = {}
        """Job id -> where its cancel is set (`tf:cancelled:<scope>`), while this process runs it (the job
        envelope, workers.envelope, notes it with the lease)."""
        self._holds: dict[str, Hold] = {}
        self._holds_changed = asyncio.Event()
        self._holds_set = 0
        """How many holds this process set: a poll that read before one of them does not undo it."""

    def held(self, tuning: str) -> Hold | None:
        """The tuning's hold as of the last poll (or this process's own `hold`)."""
        return self._holds.get(tuning)

    async def wait_released(self, tuning: str) -> None:
        """Return once the tuning is not held (seen within a poll of its release)."""
        while tuning in self._holds:
            await self._holds_changed.wait()

    async def wait_key_accepted(self, tuning: str) -> None:
        """Return once the tuning is not held for a refused key (an LLM step asks its provider nothing
        until `tunefleet resume TUNING`); a budget hold stops run starts only."""
        while (hold := self._holds.get(tuning)) is not None and hold.kind == "auth":
            await self._holds_changed.wait()

    async def hold(self, tuning: str, kind: Literal["budget", "auth"], reason: str) -> bool:
        """Hold a tuning fleet-wide: no run of it starts (its cases wait) until `tunefleet resume
        TUNING`. True if this call set the hold; False if the tuning was held already (that hold,
        and its reason, stay)."""
        hold = Hold(kind=kind, reason=reason)
        created = bool(await self._redis.hsetnx(keys.held(), tuning, hold.model_dump_json()))  # type: ignore[misc]
        if created:
            log.warning("tuning_held", tuning=tuning, kind=kind, reason=reason)
        else:
            hold = Hold.parse(await self._redis.hget(keys.held(), tuning)) or hold  # type: ignore[misc]
        self._holds_set += 1
        self._set_holds({**self._holds, tuning: hold})
        return created

    def _set_holds(self, holds: dict[str, Hold]) -> None:
        if holds.keys() == self._holds.keys():
            self._holds = holds
            return
        for tuning in self._holds.keys() - holds.keys():
            log.info("tuning_released", tuning=tuning)
        self._holds = holds
        changed, self._holds_changed = self._holds_changed, asyncio.Event()
        changed.set()

    async def watch(self, running: dict[str, asyncio.Task[object]]) -> None:
        """Every poll: follow the pause switch and the holds, and cancel the running cases that were
        cancelled."""
        await every(self._poll_s, lambda: self._tick(running), self._outage, "controls_watch")

    async def _tick(self, running: dict[str, asyncio.Task[object]]) -> None:
        tunings = sorted({self.scopes[job_id] for job_id in running if job_id in self.scopes})
        holds_set = self._holds_set
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.paused())
            pipe.hgetall(keys.held())
            for tuning in tunings:
                pipe.smembers(keys.cancelled(tuning))
            paused, held, *cancelled_sets = await pipe.execute()
        holds = {name.decode(): Hold.parse(raw) for name, raw in held.items()}
        if holds_set == self._holds_set:
            self._set_holds({name: hold for name, hold in holds.items() if hold is not None})
        if paused:
            if not self.runs.is_shut:
                log.info("fleet_paused")
            self.runs.shut()
        elif self.runs.is_shut:
            log.info("fleet_resumed")
            self.runs.open()
        cancelled = {member.decode() for members in cancelled_sets for member in members}
        self.cancelling &= set(running)
        for job_id in cancelled & set(running) - self.cancelling:
            self.cancelling.add(job_id)
            log.info("case_cancelling", job_id=job_id)
            running[job_id].cancel()
