"""The daemon: registers tunings, enqueues their cases, and keeps Redis in agreement with the store.

Reconciliation runs at start, every `reconcile_interval_s`, and at once when the daemon finds
that Redis lost the fleet's state (the epoch key is gone): every unfinished case that has neither
a queue entry nor a live lease is enqueued again, once; its recorded steps are kept in the store.
The same holds for the items of evaluations. A tuning with a held-out split has its imported version
evaluated before its cases are enqueued, its final version once they all ended, then its report
written (`service.evals.holdout`).
Beside it runs the mirror (`service.daemon.mirror`), which pushes each tuning's current version to its remote.
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
from service.client.queries import stored_runs
from service.client.submission import enqueue_cases
from service.core import keys
from service.core.events import COST_SCALE
from service.core.heap import freeze_long_lived
from service.core.models.events import EventKind
from service.core.models.jobs import CaseJob
from service.core.models.status import SubmitReport
from service.core.settings import FleetSettings
from service.core.startup import check_api_tokens, check_redis_address
from service.core.store import TuningStore
from service.daemon.lease import DaemonLock
from service.daemon.mirror import Mirror
from service.evals.holdout import HeldOutRuns
from service.gate.report import restored_counters

log = structlog.get_logger()

EPOCH_CHECK_S = 1.0
RECONCILE_CHUNK = 500
"""Cases whose queue entry and lease are asked for in one round trip of the reconciliation."""
WORKER_QUIET_S = 60.0
"""A worker whose presence was not renewed for this long is dropped from the workers set."""


class Daemon:
    """The fleet's daemon; `run_daemon` makes sure it is the only one on its Redis."""

    def __init__(self, client: TunefleetClient) -> None:
        self.client = client
        self.settings = client.settings
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
        raises the counter to Redis's clock itself, service.core.lua.NEXT_TOKEN)."""
        await self.client.redis.set(keys.epoch(), str(time.time()))

    async def reconcile(self) -> int:
        """Enqueue every orphaned unfinished case (and forget workers gone quiet); how many were enqueued."""
        quiet_ms = int((time.time() - WORKER_QUIET_S) * 1000)
        await self.client.redis.zremrangebyscore(keys.workers(), "-inf", quiet_ms)
        total = 0
        for name in self.client.store.tuning_names():
            total += await self._reconcile_tuning(self.client.store.tuning(name))
        total += await self.client.goals.reconcile()
        total += await self.client.evals.reconcile()
        if total:
            log.info("reconciled", requeued=total)
        return total

    async def _reconcile_tuning(self, tuning: TuningStore) -> int:
        redis = self.client.redis
        jobs, cancelled = await asyncio.to_thread(unfinished_cases, tuning)  # a walk of every case folder
        if cancelled:  # cancels that Redis lost: given back to the workers that take these cases
            await redis.sadd(keys.cancelled(tuning.name), *cancelled)  # type: ignore[misc]
        enqueued = 0
        for first in range(0, len(jobs), RECONCILE_CHUNK):  # the loop serves the API between chunks
            chunk = jobs[first : first + RECONCILE_CHUNK]
            async with redis.pipeline(transaction=False) as pipe:
                for job in chunk:
                    pipe.zscore(self.settings.queue, job.job_id)
                    pipe.exists(keys.lease(job.job_id))
                replies = await pipe.execute()
            placed = zip(chunk, replies[0::2], replies[1::2], strict=True)  # (job, queue score, lease)
            orphans = [job for job, score, leased in placed if score is None and not leased]
            enqueued += await self._requeue(tuning.name, orphans)
        return enqueued

    async def _requeue(self, tuning: str, orphans: list[CaseJob]) -> int:
        """Enqueue cases that have neither a queue entry nor a lease (their stale job records removed first)
        and send their `case_requeued` events, a round trip each for all of them; how many were enqueued."""
        if not orphans:
            return 0
        redis = self.client.redis
        async with redis.pipeline(transaction=False) as pipe:
            for job in orphans:
                pipe.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id))
            await pipe.execute()
        accepted = await enqueue_cases(redis, self.settings.queue, orphans, int(time.time() * 1000))
        requeued = [job for job, ok in zip(orphans, accepted, strict=True) if ok]
        detail = "reconciled: no queue entry and no lease"
        items = [{"case": job.case, "rev": job.rev, "detail": detail} for job in requeued]
        await self.client._sink().emit_many(EventKind.CASE_REQUEUED, tuning, items)
        return len(requeued)

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
        """A tuning's `tf:stats` counters as its case folders, evaluations and gates tell them (made in a
        thread: it reads every case's result)."""
        counts = _case_counts(tuning)
        for field, value in self.client.evals.stored_counters(tuning.name).items():
            counts[field] = counts.get(field, 0) + value
        for field, value in restored_counters(tuning).items():  # the gates' spend counts once
            counts[field] = counts.get(field, 0) + value
        return counts

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
        last = time.monotonic()
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
            except (OSError, RedisError) as exc:
                log.warning("daemon_tick_failed", error=str(exc))


async def run_daemon(settings: FleetSettings, tuning_files: list[Path], once: bool = False) -> None:
    """The `tunefleet daemon` command: check the Redis address, bind the API port, take the fleet's daemon
    lease, and only then register the tunings and enqueue their cases; serve and watch until SIGTERM or
    SIGINT. A fault before registering (a bad address, a busy port, another daemon) changes nothing."""
    from service.api.server import listen, serve  # the web server: only when serving

    check_redis_address(settings)
    check_api_tokens(settings)
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
                    freeze_long_lived()  # what the start made lives as long as the daemon (service.core.heap)
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


def unfinished_cases(tuning: TuningStore) -> tuple[list[CaseJob], list[str]]:
    """The jobs of the tuning's unfinished cases, and the ids of those among them cancelled in the store
    (made in a thread: `TuningStore.unfinished` walks every case folder)."""
    unfinished = tuning.unfinished()
    jobs = [CaseJob(tuning=tuning.name, case=c.case_id, rev=c.rev) for c in unfinished]
    cancelled = [job.job_id for job, c in zip(jobs, unfinished, strict=True) if c.cancel_requested()]
    return jobs, cancelled


def _case_counts(tuning: TuningStore) -> dict[str, int]:
    """The counters the tuning's case folders give (their results and their tries)."""
    counts: dict[str, int] = {
        "queued": 0,
        "tokens": 0,
        "tokens_unmeasured": 0,
        "tokens_estimated": 0,
        "cost_usd_micros": 0,
    }
    for case in tuning.latest_revs():
        counts["queued"] += 1
        for field, runs in stored_runs(case).items():
            counts[field] = counts.get(field, 0) + runs
        result = case.result()
        if result is not None:
            counts[f"state:{result.state}"] = counts.get(f"state:{result.state}", 0) + 1
            counts["tokens"] += result.usage.tokens
            counts["tokens_unmeasured"] += result.usage.unmeasured_tokens
            counts["tokens_estimated"] += result.usage.estimated_tokens
            counts["cost_usd_micros"] += round(result.usage.cost_usd * COST_SCALE)
    return counts
