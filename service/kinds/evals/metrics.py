"""The evaluations' Prometheus metrics, read at scrape time from `tf:evals` and the tunings' counters
(service.kinds.evals.counters), following the fleet's naming:

    tunefleet_eval_items_total{tuning, outcome}   eval items ended, by outcome: pass, fail (graded),
                                                  failed (infrastructure), cancelled; and void runs
    tunefleet_evals{status}                       evaluations by status (queued, running, finished,
                                                  cancelled; every status, 0 included)
    tunefleet_eval_pass_rate{tuning, eval}        an evaluation's pass rate so far (passed / graded)

The items' counter reads the tunings' sums (`eval_items:<outcome>` in `tf:stats:<tuning>`), which keep
the items of the evaluations `tunefleet gc` retired from Redis (service.kinds.evals.retired): a counter
never goes down. The gauges show the evaluations Redis still has (retired ones are the gate's, ended).

`EvalCollector.refresh()` reads; `collect()` turns what it read into metric families (a
service.metric_families.ReadCollector).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import get_args

from prometheus_client.core import Metric
from redis.asyncio import Redis

from service.core import keys
from service.kinds.evals.counters import OUTCOMES
from service.kinds.evals.models import EvalProgress, EvalStatus
from service.kinds.evals.progress import eval_progress
from service.metric_families import ReadCollector, count_by, counter, gauge

STATUSES: tuple[str, ...] = get_args(EvalStatus)
ITEM_OUTCOMES = (*OUTCOMES, "void")


@dataclass
class EvalRead:
    """What one refresh read: the evaluations Redis has, and each tuning's items ended by outcome."""

    progress: list[EvalProgress]
    items: dict[str, dict[str, int]]


class EvalCollector(ReadCollector[EvalRead]):
    """The evaluations' metric families, from what the last refresh read."""

    REFRESH_FAILED = "metrics_evals_refresh_failed"

    async def read(self, redis: Redis) -> EvalRead:
        progress = await eval_progress(redis)
        names = {n.decode() for n in await redis.smembers(keys.tunings())}  # type: ignore[misc]
        tunings = sorted(names | {p.head.tuning for p in progress})
        fields = [f"eval_items:{outcome}" for outcome in ITEM_OUTCOMES]
        async with redis.pipeline(transaction=False) as pipe:
            for tuning in tunings:
                pipe.hmget(keys.stats(tuning), fields)
            replies = await pipe.execute()
        shown = {p.head.tuning for p in progress}
        items = {
            tuning: {outcome: int(n or 0) for outcome, n in zip(ITEM_OUTCOMES, counts, strict=True)}
            for tuning, counts in zip(tunings, replies, strict=True)
            if tuning in shown or any(counts)
        }
        return EvalRead(progress=progress, items=items)

    def families(self, read: EvalRead) -> Iterator[Metric]:
        items = counter(
            "eval_items",
            "Eval items ended, by outcome (pass, fail: graded; failed: infrastructure; cancelled), and "
            "void runs set aside (void).",
            ["tuning", "outcome"],
        )
        for tuning, counts in sorted(read.items.items()):
            for outcome, n in counts.items():
                items.add_metric([tuning, outcome], n)
        evals = gauge("evals", "Evaluations by status.", ["status"])
        for status, n in count_by(STATUSES, (p.status for p in read.progress)).items():
            evals.add_metric([status], n)
        rate = gauge(
            "eval_pass_rate", "An evaluation's pass rate so far: passed / graded items.", ["tuning", "eval"]
        )
        for p in read.progress:
            if p.rate.graded:
                rate.add_metric([p.head.tuning, p.head.id], p.rate.rate)
        yield from (items, evals, rate)


def collector() -> EvalCollector:
    """The kind's collector (service.core.kinds: the metrics take every kind's `metrics`)."""
    return EvalCollector()
