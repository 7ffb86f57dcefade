"""The goals' Prometheus metrics, read from the Redis hash `tf:goals` at scrape time:

    tunefleet_goals{status}              goals by status (every status, 0 included)
    tunefleet_goal_iterations_total      iterations begun, summed over every goal

`GoalCollector.refresh()` reads the hash; `collect()` turns what it read into metric families (no I/O
at collect time, as service.metrics.FleetCollector). A failed read yields nothing (`tunefleet_redis_up`
says why); an unreadable entry is skipped with a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.models.goal import GoalStatus
from service.core.models.goal_state import GoalSummary

log = structlog.get_logger()

NAMESPACE = "tunefleet"
STATUSES: tuple[str, ...] = get_args(GoalStatus)


async def read_goals(redis: Redis) -> list[GoalSummary]:
    """Every goal's summary in the hash (an unreadable one skipped)."""
    raw = await redis.hgetall(keys.goals())  # type: ignore[misc]
    found = []
    for goal_id, value in raw.items():
        try:
            found.append(GoalSummary.model_validate_json(value))
        except ValidationError as exc:
            name = goal_id.decode(errors="replace") if isinstance(goal_id, bytes) else str(goal_id)
            log.warning("metrics_goal_unreadable", goal=name, error=str(exc))
    return found


class GoalCollector:
    """The goals' metric families, from the summaries the last refresh read."""

    def __init__(self) -> None:
        self.summaries: list[GoalSummary] | None = None

    async def refresh(self, redis: Redis) -> None:
        try:
            self.summaries = await read_goals(redis)
        except (RedisError, OSError) as exc:
            log.warning("metrics_goals_refresh_failed", error=str(exc))
            self.summaries = None

    def collect(self) -> Iterator[Metric]:
        if self.summaries is None:
            return
        goals = GaugeMetricFamily(f"{NAMESPACE}_goals", "Goals by status.", labels=["status"])
        for status in STATUSES:
            goals.add_metric([status], sum(1 for s in self.summaries if s.status == status))
        iterations = CounterMetricFamily(
            f"{NAMESPACE}_goal_iterations", "Iterations begun, summed over every goal."
        )
        iterations.add_metric([], sum(s.iteration for s in self.summaries))
        yield from (goals, iterations)
