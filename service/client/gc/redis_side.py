"""gc of what the queue's state decides: snapshots (none while a job is queued or running) and the
members of `tf:cancelled:<tuning>` of jobs neither queued nor leased."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import WatchError

from service.client.gc.report import GcReport, Removal, footprint
from service.core import keys
from service.core.io.idle import idle
from service.core.store import Store
from service.core.system import remove_tree

PRUNE_AT_ONCE = 200
"""Cancels removed per optimistic transaction (below)."""


async def snapshots(redis: Redis, store: Store, name: str, age_s: float, report: GcReport) -> None:
    """The tuning's snapshots of versions other than its current one, extracted `age_s` ago or more."""
    tuning = store.tuning(name)
    current = await redis.get(keys.version(name))
    if current is None:
        report.kept.append(f"snapshots of {name}: its current version is not known (no tf:version:{name})")
        return
    if not tuning.snapshots.is_dir():
        return
    now_s = time.time()
    for entry in sorted(tuning.snapshots.iterdir()):
        if entry.name.startswith(".") or entry.name == current.decode() or not entry.is_dir():
            continue
        if now_s - entry.stat().st_mtime < age_s:
            continue
        size, inodes = await asyncio.to_thread(footprint, entry)
        report.removals.append(
            Removal(kind="snapshot", tuning=name, name=entry.name, bytes=size, inodes=inodes)
        )
        if report.applied:
            await asyncio.to_thread(_remove_snapshot, entry)


def _remove_snapshot(entry: Path) -> None:
    """Rename the snapshot out of its name (atomic: a run asking for it now extracts a new one), remove it."""
    aside = entry.with_name(f".gc-{entry.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        entry.rename(aside)
    except FileNotFoundError:
        return
    remove_tree(aside)


async def cancelled(redis: Redis, queue: str, name: str, report: GcReport) -> None:
    """The members of `tf:cancelled:<name>` whose jobs are neither queued nor leased."""
    members = sorted(m.decode() for m in await redis.smembers(keys.cancelled(name)))  # type: ignore[misc]
    if not members:
        return
    ended = [
        job_id for job_id, is_idle in zip(members, await idle(redis, queue, members), strict=True) if is_idle
    ]
    if report.applied and ended:  # checked again under WATCH: a job queued meanwhile keeps its cancel
        pruned: list[str] = []
        for start in range(0, len(ended), PRUNE_AT_ONCE):
            pruned += await _prune(redis, queue, keys.cancelled(name), ended[start : start + PRUNE_AT_ONCE])
        if len(pruned) < len(ended):
            report.kept.append(f"cancels of {name}: {len(ended) - len(pruned)} whose jobs moved meanwhile")
        ended = pruned
    for job_id in ended:
        report.removals.append(Removal(kind="cancelled", tuning=name, name=job_id))


async def _prune(redis: Redis, queue: str, cancelled_key: str, job_ids: list[str]) -> list[str]:
    """SREM these jobs' cancels if, under WATCH of the queue and their leases, none is queued or leased;
    the ids removed (none when the queue or a lease moved meanwhile: the next gc tries again).

    An optimistic transaction rather than a script: a script must name the leases among its keys, and
    the submitter, who runs gc, may only read them (deploy/redis/users.acl)."""
    leases = [keys.lease(job_id) for job_id in job_ids]
    async with redis.pipeline(transaction=True) as pipe:
        try:
            await pipe.watch(queue, *leases)
            still = await idle(redis, queue, job_ids)
            free = [job_id for job_id, is_idle in zip(job_ids, still, strict=True) if is_idle]
            if not free:
                return []
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.srem(cancelled_key, *free)
            await pipe.execute()
        except WatchError:
            return []
    return free
