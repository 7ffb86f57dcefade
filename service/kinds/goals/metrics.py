"""The goals' Prometheus metrics, read from the Redis hash `tf:goals` at scrape time:

    tunefleet_goals{status}              goals by status (every status, 0 included)
    tunefleet_goal_iterations_total      iterations begun, summed over every goal

`GoalCollector.refresh()` reads the hash; `collect()` turns what it read into metric families (a
service.metric_families.ReadCollector). A failed read yields nothing (`tunefleet_redis_up` says why);
an unreadable entry is skipped with a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import structlog
from prometheus_client.core import Metric
from pydantic import ValidationError
from redis.asyncio import Redis

from service.core import keys
from service.kinds.goals.models import GoalStatus
from service.kinds.goals.state import GoalSummary
from service.metric_families import ReadCollector, count_by, counter, gauge

log = structlog.get_logger()

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


class GoalCollector(ReadCollector[list[GoalSummary]]):
    """The goals' metric families, from the summaries the last refresh read."""

    REFRESH_FAILED = "metrics_goals_refresh_failed"

    async def read(self, redis: Redis) -> list[GoalSummary]:
        return await read_goals(redis)

    def families(self, read: list[GoalSummary]) -> Iterator[Metric]:
        goals = gauge("goals", "Goals by status.", ["status"])
        for status, n in count_by(STATUSES, (s.status for s in read)).items():
            goals.add_metric([status], n)
        iterations = counter("goal_iterations", "Iterations begun, summed over every goal.")
        iterations.add_metric([], sum(s.iteration for s in read))
        yield from (goals, iterations)


def collector() -> GoalCollector:
    """The kind's collector (service.core.kinds: the metrics take every kind's `metrics`)."""
    return GoalCollector()
