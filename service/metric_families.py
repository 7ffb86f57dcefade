"""What the fleet's Prometheus collectors share (service.metrics, service.kinds.goals.metrics,
service.kinds.evals.metrics): the metric families' names under one namespace, and a collector that reads at
scrape time and turns what it read into families with no I/O at collect time.

A `ReadCollector` reads in `refresh()` (awaited by the scrape before the registry collects); a read that
fails logs one warning and leaves nothing to collect, so a family never shows stale numbers (the fleet's
`tunefleet_redis_up` says why).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar, Generic, TypeVar

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core.errors import TunefleetError

log = structlog.get_logger()

NAMESPACE = "tunefleet"
T = TypeVar("T")


def gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    """The gauge family `tunefleet_<name>`."""
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels))


def counter(name: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
    """The counter family `tunefleet_<name>` (exposed with its `_total` suffix)."""
    return CounterMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels))


def count_by(labels: Iterable[str], values: Iterable[str]) -> dict[str, int]:
    """How many of `values` are each of `labels` (every label present, 0 included)."""
    counts = dict.fromkeys(labels, 0)
    for value in values:
        if value in counts:
            counts[value] += 1
    return counts


class ReadCollector(ABC, Generic[T]):
    """Metric families made from what the last `refresh()` read (None when that read failed)."""

    REFRESH_FAILED: ClassVar[str]
    """The warning logged when a read fails (a snake_case event)."""

    def __init__(self) -> None:
        self.last: T | None = None

    @abstractmethod
    async def read(self, redis: Redis) -> T:
        """Read what the families are made from."""

    @abstractmethod
    def families(self, read: T) -> Iterator[Metric]:
        """The metric families, from what was read (no I/O)."""

    async def refresh(self, redis: Redis) -> T | None:
        """Read for the next collection; None (and nothing to collect) when Redis or the read fails."""
        try:
            self.last = await self.read(redis)
        except (RedisError, OSError, TunefleetError) as exc:
            log.warning(self.REFRESH_FAILED, error=str(exc))
            self.last = None
        return self.last

    def collect(self) -> Iterator[Metric]:
        if self.last is not None:
            yield from self.families(self.last)
