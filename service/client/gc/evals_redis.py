"""gc of the acceptance gate's ended evaluations in Redis: their head (`tf:evals`) and their own
counters (`eval:<id>:*` in `tf:stats:<tuning>`), which nothing removed before (bench soak: about 22
evaluations per gate, so Redis grew with every case).

Only evaluations of purpose `gate` and `gate-base` are retired, once ended (Redis's counters say every
item ended, and `RESULTS.json` exists) at least `retention_eval_item_age_s` ago (`RESULTS.json`'s age).
Why it is safe, read by read:

- `eval status` (the list), `GET /api/evals`: they show Redis's heads plus the retired record gc writes
  to the store first (service.kinds.evals.retired), the progress exactly as Redis gave it;
- `eval status ID`, `eval show`, `eval results`, `eval compare`, the report, REPORT.md, `versions`,
  `why` and the gate's own reads: they read the evaluation's folder (kept), not Redis;
- a gate that reuses a base evaluation (`Evals.launch`) reads its items' outcomes by walking its folder
  (its first poll always walks), and puts back no head;
- the daemon's reconciliation skips retired evaluations, and the counters rebuilt after a loss of Redis
  leave their own fields out; the tuning's sums (`eval_items:*`, tokens, cost) keep their items.

User and held-out evaluations are kept: `tunefleet eval --name` of an existing evaluation puts its head
back (with no counters, it would read `queued`), and the held-out runner reads its counters.
"""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from service.client.gc.report import GcReport, Removal
from service.core import keys
from service.core.store import Store
from service.kinds.evals.counters import OUTCOMES, PREFIX
from service.kinds.evals.models import EvalProgress
from service.kinds.evals.progress import eval_progress
from service.kinds.evals.retired import RETIRED_FILE, RetiredEvals
from service.kinds.evals.store import EvalsStore

PURPOSES = ("gate", "gate-base")
NAMES = ("items", *OUTCOMES, "void")
"""The counters of one evaluation (service.kinds.evals.counters)."""
AT_ONCE = 500
"""Evaluations retired per transaction (one short MULTI each)."""


def own_fields(eval_id: str) -> list[str]:
    """The evaluation's own fields in its tuning's counters hash."""
    return [f"{PREFIX}{eval_id}:{name}" for name in NAMES]


async def retire(redis: Redis, store: Store, age_s: float, report: GcReport) -> None:
    """Retire the gate's ended evaluations past `age_s` from Redis (module docstring), each said as one
    `eval_redis` removal with the bytes of the fields removed (names and values)."""
    folder = EvalsStore(store.root / "evals")
    chosen = [p for p in await eval_progress(redis) if _retirable(p, folder, age_s)]
    if not chosen:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for p in chosen:
            pipe.hget(keys.evals(), p.head.id)
            pipe.hmget(keys.stats(p.head.tuning), own_fields(p.head.id))
        replies = await pipe.execute()
    for p, head, counts in zip(chosen, replies[::2], replies[1::2], strict=True):
        fields = [(f, v) for f, v in zip(own_fields(p.head.id), counts, strict=True) if v is not None]
        size = len(p.head.id) + len(head or b"") + sum(len(f) + len(v) for f, v in fields)
        report.removals.append(
            Removal(
                kind="eval_redis",
                tuning=p.head.tuning,
                name=p.head.id,
                redis_bytes=size,
                redis_fields=len(fields) + (head is not None),
            )
        )
    retired = RetiredEvals(folder.root)
    report.added_bytes += sum(len(p.model_dump_json()) + 1 for p in chosen)
    report.added_inodes += not retired.path.exists()
    report.kept.append(
        f"the progress of {len(chosen)} evaluations leaving Redis, in evals/{RETIRED_FILE} "
        f"({report.added_bytes:,} bytes, added to the store)"
    )
    if not report.applied:
        return
    for start in range(0, len(chosen), AT_ONCE):
        batch = chosen[start : start + AT_ONCE]
        await asyncio.to_thread(retired.add, batch)  # first: reads find it there
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.evals(), *[p.head.id for p in batch])
            for p in batch:
                pipe.hdel(keys.stats(p.head.tuning), *own_fields(p.head.id))
            await pipe.execute()


def _retirable(progress: EvalProgress, folder: EvalsStore, age_s: float) -> bool:
    """A gate's evaluation whose counters say it ended, with a RESULTS.json at least `age_s` old."""
    if progress.head.purpose not in PURPOSES or progress.status not in ("finished", "cancelled"):
        return False
    try:
        written_s = folder.eval(progress.head.id).results_file.stat().st_mtime
    except FileNotFoundError:
        return False
    return time.time() - written_s >= age_s
