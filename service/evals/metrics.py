"""The evaluations' Prometheus metrics, read at scrape time from `tf:evals` and the tunings' counters
(service.evals.counters), following the fleet's naming:

    tunefleet_eval_items_total{tuning, outcome}   eval items ended, by outcome: pass, fail (graded),
                                                  failed (infrastructure), cancelled; and void runs
    tunefleet_evals{status}                       evaluations by status (queued, running, finished,
                                                  cancelled; every status, 0 included)
    tunefleet_eval_pass_rate{tuning, eval}        an evaluation's pass rate so far (passed / graded)

`EvalCollector.refresh()` reads; `collect()` turns what it read into metric families (no I/O at
collect time, as service.metrics.FleetCollector).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.evals.counters import OUTCOMES
from service.evals.models import EvalProgress, EvalStatus
from service.evals.progress import eval_progress

log = structlog.get_logger()

NAMESPACE = "tunefleet"
STATUSES: tuple[str, ...] = get_args(EvalStatus)


class EvalCollector:
    """The evaluations' metric families, from the progress the last refresh read."""

    def __init__(self) -> None:
        self.progress: list[EvalProgress] | None = None

    async def refresh(self, redis: Redis) -> None:
        try:
            self.progress = await eval_progress(redis)
        except (RedisError, OSError) as exc:
            log.warning("metrics_evals_refresh_failed", error=str(exc))
            self.progress = None

    def collect(self) -> Iterator[Metric]:
        if self.progress is None:
            return
        items = CounterMetricFamily(
            f"{NAMESPACE}_eval_items",
            "Eval items ended, by outcome (pass, fail: graded; failed: infrastructure; cancelled), and "
            "void runs set aside (void).",
            labels=["tuning", "outcome"],
        )
        by_tuning: dict[str, dict[str, int]] = {}
        for p in self.progress:
            counts = by_tuning.setdefault(p.head.tuning, dict.fromkeys((*OUTCOMES, "void"), 0))
            counts["pass"] += p.passed
            counts["fail"] += p.failed_grade
            counts["failed"] += p.failed
            counts["cancelled"] += p.cancelled
            counts["void"] += p.voids
        for tuning, counts in sorted(by_tuning.items()):
            for outcome, n in counts.items():
                items.add_metric([tuning, outcome], n)
        evals = GaugeMetricFamily(f"{NAMESPACE}_evals", "Evaluations by status.", labels=["status"])
        for status in STATUSES:
            evals.add_metric([status], sum(1 for p in self.progress if p.status == status))
        rate = GaugeMetricFamily(
            f"{NAMESPACE}_eval_pass_rate",
            "An evaluation's pass rate so far: passed / graded items.",
            labels=["tuning", "eval"],
        )
        for p in self.progress:
            if p.rate.graded:
                rate.add_metric([p.head.tuning, p.head.id], p.rate.rate)
        yield from (items, evals, rate)
