"""A full store, or a full Redis, is a fleet-level outage, not each job's crash.

A write of a record that meets ENOSPC or EDQUOT (the store's disk is full, or its quota spent), or a
Redis command refused with OOM (`maxmemory` reached under `noeviction`), is no fault of the job that
met it: every job would meet it. So the job envelope (workers.envelope) hands such a job back to the
queue, marking nothing and spending no try, and reports the outage here, where it is handled like the
sandbox breaker (workers.breaker):

    the first job of this process to meet it     one warning (`store_full`), claiming stops here
    a full store, first in the fleet             `tf:store-full` set (SET NX), one `store_full` event
    while this process is shut, or the flag      a probe: a 64 KiB file written, synced and removed
      `tf:store-full` is up (read every second)    in the store (a SET in Redis, for a full Redis),
                                                   at a growing interval (capped, like Redis's outage)
    the first good probe                         claiming resumes here; whoever deletes
                                                   `tf:store-full` emits one `store_recovered` event

The events are the fleet's, of no tuning (no line in an `events.jsonl` on the full disk: the stream and
`status` carry them). A full Redis can take no event and no key: it is logged once per outage by each
worker (`redis_full`), and `status` and /readyz, which read Redis, say why they cannot answer.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.events import EventSink
from service.core.models.events import EventKind
from service.core.settings import FleetSettings
from workers.door import Door

log = structlog.get_logger()

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
PROBE_BYTES = 64 * 1024
"""What a probe writes: more than a block, so that a disk with a few bytes left is not taken for one
with room."""
PROBE_TTL_MS = 60_000
FLAG_EVERY_S = 1.0
"""How often a worker that claims reads the fleet's flag (a worker that meets the full store itself stops
at once: the flag only stops the others sooner)."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what caused it and what it was raised while handling, and a group's members."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)


def store_full(exc: BaseException) -> str | None:
    """Why the store is full, when `exc` is (or was caused by) ENOSPC or EDQUOT; else None."""
    for cause in _chain(exc):
        if isinstance(cause, OSError) and cause.errno in FULL_ERRNOS:
            where = f" ({cause.filename})" if cause.filename else ""
            return f"the store is full: {os.strerror(cause.errno)}{where}"
    return None


def redis_full(exc: BaseException) -> str | None:
    """Why Redis refused a write for want of memory (OOM under `maxmemory`), when it did; else None."""
    for cause in _chain(exc):
        text = str(cause)
        if isinstance(cause, RedisError) and (text.startswith("OOM") or "maxmemory" in text):
            return f"Redis is full: {text}"
    return None


class StoreWatch:
    """One per worker process: shuts its claims while the store (or Redis) is full, probes, reopens."""

    def __init__(self, redis: Redis, settings: FleetSettings, sink: EventSink, worker: str) -> None:
        self._redis = redis
        self._settings = settings
        """Its store, and how often it polls (`poll_delay_s`) and probes at most (`outage_backoff_max_s`)."""
        self._sink = sink
        self._worker = worker
        self.claims = Door()
        """Shut while the store or Redis is full: the poll claims nothing."""
        self.reason: str | None = None
        """Why this process stopped claiming (None: it claims)."""
        self._redis_full = False
        self._since_s = 0.0
        self._failures = 0

    async def report(self, reason: str, *, redis: bool = False) -> None:
        """A job met a full store (or Redis): stop claiming here; the fleet is told once per outage."""
        if self.reason is None:
            self.reason = reason
            self._since_s = time.monotonic()
            self._redis_full = redis
            self.claims.shut()
            log.warning("redis_full" if redis else "store_full", reason=reason)
        if redis:
            return
        try:
            first = await self._redis.set(keys.store_full(), f"{self._worker}: {reason}", nx=True)
            if first:
                await self._sink.emit(EventKind.STORE_FULL, None, detail=reason)
        except RedisError as exc:
            log.info("store_full_not_shared", error=str(exc))

    async def watch(self) -> None:
        """Until cancelled: while this process is shut, or the fleet's flag is up, probe at a growing
        interval; the first good probe reopens the claims (and lowers the flag)."""
        poll_s = self._settings.poll_delay_s
        while True:
            await self._tick()
            if self.reason is None:  # healthy: the fleet's flag is read once a second, not every poll
                await asyncio.sleep(max(poll_s, FLAG_EVERY_S))
                continue
            wait_s = min(self._settings.outage_backoff_max_s, poll_s * (1 << min(self._failures, 16)))
            await asyncio.sleep(max(poll_s, wait_s))

    async def _tick(self) -> None:
        flagged = False
        if not self._redis_full:
            try:
                flagged = bool(await self._redis.exists(keys.store_full()))
            except RedisError:
                return  # Redis away: RedisOutage's business, not the store's
        if self.reason is None and not flagged:
            self._failures = 0
            return
        why = await self._probe()
        if why is not None:
            self._failures += 1
            if self.reason is None:  # another worker found it full: stop claiming here too
                self.reason = why
                self._since_s = time.monotonic()
                self.claims.shut()
            return
        await self._recovered(flagged)

    async def _probe(self) -> str | None:
        """None when a write goes through; else why not."""
        if self._redis_full:
            try:
                await self._redis.set(keys.store_probe(self._worker), b"x" * 1024, px=PROBE_TTL_MS)
            except RedisError as exc:
                return redis_full(exc) or f"Redis refused the probe: {exc}"
            return None
        try:
            await asyncio.to_thread(_write_probe, self._settings.store, self._worker)
        except OSError as exc:
            return store_full(exc) or f"the store refused the probe: {exc.strerror or exc}"
        return None

    async def _recovered(self, flagged: bool) -> None:
        down_s = round(time.monotonic() - self._since_s, 1) if self.reason is not None else 0.0
        was = self.reason
        self.reason = None
        self._failures = 0
        self._redis_full = False
        self.claims.open()
        if was is not None:
            log.info("store_writable", down_s=down_s)
        if flagged:
            try:
                if await self._redis.delete(keys.store_full()):
                    await self._sink.emit(EventKind.STORE_RECOVERED, None, detail=f"after {down_s} s")
            except RedisError as exc:
                log.info("store_recovery_not_shared", error=str(exc))


def _write_probe(store: Path, worker: str) -> None:
    """Write PROBE_BYTES to a file of this worker's in the store, sync it, and remove it."""
    path = store / f".probe-{worker.replace('/', '_').replace(':', '_')}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if os.write(fd, b"\0" * PROBE_BYTES) < PROBE_BYTES:  # a short write: the disk ran out
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)


def outage_of(exc: BaseException) -> tuple[str, bool] | None:
    """(why, whether it is Redis) when `exc` says the store or Redis is full; else None."""
    reason = store_full(exc)
    if reason is not None:
        return reason, False
    reason = redis_full(exc)
    return (reason, True) if reason is not None else None
