"""The daemon: registers tunings, enqueues their cases, and keeps Redis in agreement with the store.

Reconciliation runs at start, every `reconcile_interval_s`, and at once when the daemon finds
that Redis lost the fleet's state (the epoch key is gone): every unfinished case that has neither
a queue entry nor a live lease is enqueued again, once; its recorded steps are kept in the store.
The same holds for the items of evaluations. A tuning with a held-out split has its imported version
evaluated before its cases are enqueued, its final version once they all ended, then its report
written (`service.kinds.evals.holdout`).
Beside it runs the mirror (`service.daemon.mirror`), which pushes each tuning's current version to its remote.
With `gc_interval_s` set, it also runs `tunefleet gc --apply` that often (`service.client.gc`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

import structlog
from redis.exceptions import RedisError

from service.client.client import TunefleetClient
from service.client.gc import collect
from service.core import keys
from service.core.io.heap import freeze_long_lived
from service.core.kinds import FleetParts
from service.core.models.status import SubmitReport
from service.core.settings import FleetSettings
from service.core.startup import check_api_tokens, check_redis_address
from service.core.store import TuningStore
from service.daemon.lease import DaemonLock
from service.daemon.mirror import Mirror
from service.kinds.evals.holdout import HeldOutRuns
from service.kinds.registry import slices

log = structlog.get_logger()

EPOCH_CHECK_S = 1.0
WORKER_QUIET_S = 60.0
"""A worker whose presence was not renewed for this long is dropped from the workers set."""


class Daemon:
    """The fleet's daemon; `run_daemon` makes sure it is the only one on its Redis."""

    def __init__(self, client: TunefleetClient) -> None:
        self.client = client
        self.settings = client.settings
        parts = FleetParts(client.redis, client.store, client.settings)
        self.kinds = [(kind.name, kind.fleet(parts)) for kind in slices(client.settings)]
        """Every kind's fleet side (service.core.kinds), reconciled and restored in turn."""
        self.stopping = asyncio.Event()
        self.held_out = HeldOutRuns(client.evals, client.store, self.settings.reconcile_interval_s)

    async def start(self, tuning_files: list[Path]) -> dict[str, SubmitReport]:
        """Register the tunings, enqueue their cases, and give failed cases another go."""
        reports = {}
        for file in tuning_files:
            config = await self.client.register(file)
            await self.held_out.before_tuning(config.name)  # its items queued before the train cases
            # Failed revs are left to requeue_failed, which bounds how often a start runs them again.
            reports[config.name] = await self.client.submit_path(
                config.name, config.cases, rerun_failed=False
            )
            again = await self.client.requeue_failed(config.name, config.max_failed_reruns)
            log.info(
                "tuning_started",
                tuning=config.name,
                accepted=len(reports[config.name].accepted),
                duplicates=len(reports[config.name].duplicates),
                refused=len(reports[config.name].refused),
                requeued_failed=len(again),
            )
            for refusal in reports[config.name].refused:
                log.error("case_refused", tuning=config.name, file=refusal.file, error=refusal.error)
        await self._mark_epoch()
        await self.reconcile()
        return reports

    async def _mark_epoch(self) -> None:
        """Note that Redis holds the fleet's state (fencing tokens need nothing from here: each grant
        raises the counter to Redis's clock itself, service.core.io.lua.NEXT_TOKEN)."""
        await self.client.redis.set(keys.epoch(), str(time.time()))

    async def reconcile(self) -> int:
        """Enqueue every orphaned unfinished job of every kind (and forget workers gone quiet); how many
        were enqueued."""
        quiet_ms = int((time.time() - WORKER_QUIET_S) * 1000)
        await self.client.redis.zremrangebyscore(keys.workers(), "-inf", quiet_ms)
        total = 0
        for _name, fleet in self.kinds:
            total += await fleet.reconcile()
        if total:
            log.info("reconciled", requeued=total)
        return total

    async def recover_if_lost(self) -> bool:
        """If Redis lost the fleet's state, restore what the store knows; True when it did."""
        redis = self.client.redis
        if await redis.exists(keys.epoch()):
            return False
        log.warning("redis_state_lost", action="restoring from the store")
        for name in self.client.store.tuning_names():
            await self._restore_tuning(self.client.store.tuning(name))
        await self._mark_epoch()
        await self.reconcile()
        return True

    async def _restore_tuning(self, tuning: TuningStore) -> None:
        redis = self.client.redis
        counts = await asyncio.to_thread(self._stored_counts, tuning)  # reads every case's result
        async with redis.pipeline(transaction=True) as pipe:
            pipe.sadd(keys.tunings(), tuning.name)
            pipe.delete(keys.stats(tuning.name))
            pipe.hset(keys.stats(tuning.name), mapping=counts)
            await pipe.execute()

    def _stored_counts(self, tuning: TuningStore) -> dict[str, int]:
        """A tuning's `tf:stats` counters as every kind's part of the store tells them (made in a thread: it
        reads every case's result)."""
        counts: dict[str, int] = {}
        for _name, fleet in self.kinds:
            for field, value in fleet.stored_counters(tuning).items():
                counts[field] = counts.get(field, 0) + value
        return counts

    async def collect_garbage(self) -> None:
        """`tunefleet gc --apply`, on the daemon's schedule (`gc_interval_s`), logged when it removed
        anything."""
        report = await collect(self.client.redis, self.settings, apply=True)
        if report.removals:
            log.info("gc_applied", removed=len(report.removals), bytes=report.bytes, inodes=report.inodes)

    async def run(self) -> None:
        """Watch for Redis loss every second, reconcile periodically and mirror the tunings' versions to
        their remotes, until `stopping` is set; a push under way is then cancelled."""
        mirror = Mirror(self.client.redis, self.client.store, self.settings)
        async with asyncio.TaskGroup() as group:
            mirroring = group.create_task(mirror.run(self.stopping), name="mirror")
            try:
                await self._watch()
            finally:
                mirroring.cancel()

    async def _watch(self) -> None:
        last = last_gc = time.monotonic()
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), EPOCH_CHECK_S)
            if self.stopping.is_set():
                break
            try:
                if await self.recover_if_lost():
                    last = time.monotonic()
                elif time.monotonic() - last >= self.settings.reconcile_interval_s:
                    await self.reconcile()
                    last = time.monotonic()
                await self.held_out.advance()
                gc_every_s = self.settings.gc_interval_s
                if gc_every_s is not None and time.monotonic() - last_gc >= gc_every_s:
                    last_gc = time.monotonic()
                    await self.collect_garbage()
            except (OSError, RedisError) as exc:
                log.warning("daemon_tick_failed", error=str(exc))


async def run_daemon(settings: FleetSettings, tuning_files: list[Path], once: bool = False) -> None:
    """The `tunefleet daemon` command: check the Redis address and every tuning file (as `tunefleet check`
    does, with no Redis), bind the API port, take the fleet's daemon lease, and only then register the
    tunings and enqueue their cases; serve and watch until SIGTERM or SIGINT. A fault before registering (a
    bad address, a bad tuning file, a busy port, another daemon) changes nothing."""
    from service.api.server import listen, serve  # the web server: only when serving
    from service.client.tunings import load_tuning_file

    check_redis_address(settings)
    check_api_tokens(settings)
    for file in tuning_files:  # a tuning that would not load is refused before any contact with Redis
        load_tuning_file(file)
    sock = None if once else listen(settings.api_host, settings.api_port)
    api = "none (--once)" if sock is None else "{}:{}".format(*sock.getsockname()[:2])
    try:
        async with TunefleetClient(settings) as client:
            lease = DaemonLock(client.redis, settings.daemon_lease_s, api)
            await lease.acquire()
            try:
                daemon = Daemon(client)
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, daemon.stopping.set)
                # The lease is renewed from the first registration on: a start that registers many cases
                # takes longer than `daemon_lease_s`, and a lapsed lease would let a second daemon in.
                async with asyncio.TaskGroup() as group:
                    group.create_task(lease.keep(daemon.stopping), name="daemon-lease")
                    await daemon.start(tuning_files)
                    freeze_long_lived()  # what the start made lives as long as the daemon (core.io.heap)
                    if sock is None:
                        daemon.stopping.set()  # --once: registered and enqueued, nothing more to keep
                    else:
                        group.create_task(serve(client, settings, daemon.stopping, sock), name="api")
                        await daemon.run()
            finally:
                await lease.release()
    finally:
        if sock is not None:
            sock.close()
