"""`tunefleet gc`: what the store and Redis keep that nothing needs any more, said (dry, by default)
or removed (`--apply`), with the bytes and inodes that frees.

The retention policy is the fleet's settings (`retention_*_age_s`, service.core.settings; a bad value
is refused in one line naming it). Each category, and why removing it is safe, is in its module:

- `evals_redis`: the Redis head and counters of the acceptance gate's ended evaluations (their
  progress recorded in the store first, so the list of evaluations reads the same);
- `redis_side`: snapshots of versions other than the current one (only while the queue is empty) and
  the members of `tf:cancelled:<tuning>` of jobs neither queued nor leased;
- `repo`: the candidate refs of decided tries, then the repository's loose refs and objects packed;
- `records`: the items' folders of ended evaluations (their outcomes kept) and the agents' folders of
  the void tries of ended cases (their records kept).

Nothing a read needs is touched: results, records, notes, memories, `events.jsonl`, REPORT.md, each
evaluation's RESULTS.json and items' outcomes, the rejected refs and every commit. `results`, `show`,
`versions`, `why`, `diff`, `eval status`, `eval results`, `eval compare` and the report answer the same
after a gc (tests/test_gc.py, tests/test_gc_reads.py).
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from service.client.gc import evals_redis, records, redis_side, repo
from service.client.gc.report import GcReport, Removal, footprint
from service.core import keys
from service.core.settings import FleetSettings
from service.core.store import Store

__all__ = ["GcReport", "Removal", "collect", "footprint"]


async def collect(redis: Redis, settings: FleetSettings, *, apply: bool) -> GcReport:
    """What gc removes now (with `apply`, removed)."""
    report = GcReport(applied=apply)
    store = Store(settings.store)
    names = store.tuning_names()
    if await redis.zcard(settings.queue):
        report.kept.append("snapshots: jobs are queued or running, and a running step may read one")
    else:
        for name in names:
            await redis_side.snapshots(redis, store, name, settings.retention_snapshot_age_s, report)
    for name in [*names, keys.GOALS_SCOPE]:  # the goals' cancels are kept as a scope of their own
        await redis_side.cancelled(redis, settings.queue, name, report)
    for name in names:
        tuning = store.tuning(name)
        report.removals += await asyncio.to_thread(
            records.voids, tuning, settings.retention_void_age_s, apply
        )
        report.removals += await repo.candidate_refs(
            tuning, settings.retention_candidate_age_s, settings.git_timeout_s, apply
        )
    removed, kept = await asyncio.to_thread(
        records.eval_items, store.root / "evals", settings.retention_eval_item_age_s, apply
    )
    report.removals += removed
    report.kept += kept
    await evals_redis.retire(redis, store, settings.retention_eval_item_age_s, report)
    return report
