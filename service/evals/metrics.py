"""The evaluations' Prometheus metrics, read at scrape time from `tf:evals` and the tunings' counters
(service.evals.counters), following the fleet's naming:

    tunefleet_eval_items_total{tuning, outcome}   eval items ended, by outcome: pass, fail (graded),
                                                  failed (infrastructure), cancelled; and void runs
    tunefleet_evals{status}                       evaluations by status (queued, running, finished,
                                                  cancelled; every status, 0 included)
    tunefleet_eval_pass_rate{tuning, eval}        an evaluation's pass rate so far (passed / graded)

`EvalCollector.refresh()` reads; `collect()` turns what it read into metric families (a
service.metric_families.ReadCollector).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from prometheus_client.core import Metric
from redis.asyncio import Redis

from service.evals.counters import OUTCOMES
from service.evals.models import EvalProgress, EvalStatus
from service.evals.progress import eval_progress
from service.metric_families import ReadCollector, count_by, counter, gauge

STATUSES: tuple[str, ...] = get_args(EvalStatus)


class EvalCollector(ReadCollector[list[EvalProgress]]):
    """The evaluations' metric families, from the progress the last refresh read."""

    REFRESH_FAILED = "metrics_evals_refresh_failed"

    async def read(self, redis: Redis) -> list[EvalProgress]:
        return await eval_progress(redis)

    def families(self, read: list[EvalProgress]) -> Iterator[Metric]:
        items = counter(
            "eval_items",
            "Eval items ended, by outcome (pass, fail: graded; failed: infrastructure; cancelled), and "
            "void runs set aside (void).",
            ["tuning", "outcome"],
        )
        by_tuning: dict[str, dict[str, int]] = {}
        for p in read:
            counts = by_tuning.setdefault(p.head.tuning, dict.fromkeys((*OUTCOMES, "void"), 0))
            counts["pass"] += p.passed
            counts["fail"] += p.failed_grade
            counts["failed"] += p.failed
            counts["cancelled"] += p.cancelled
            counts["void"] += p.voids
        for tuning, counts in sorted(by_tuning.items()):
            for outcome, n in counts.items():
                items.add_metric([tuning, outcome], n)
        evals = gauge("evals", "Evaluations by status.", ["status"])
        for status, n in count_by(STATUSES, (p.status for p in read)).items():
            evals.add_metric([status], n)
        rate = gauge(
            "eval_pass_rate", "An evaluation's pass rate so far: passed / graded items.", ["tuning", "eval"]
        )
        for p in read:
            if p.rate.graded:
                rate.add_metric([p.head.tuning, p.head.id], p.rate.rate)
        yield from (items, evals, rate)
