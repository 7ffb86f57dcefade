"""A worker's health endpoints: alive while its poll loop turns, ready while Redis and the store are."""

from __future__ import annotations

import time

from service.health import HealthChecks
from service.settings import FleetSettings
from workers.fleet_worker import FleetWorker

STALE_POLLS = 25
"""Polls a worker may miss before it is not alive (a poll that meets a Redis outage fails fast and the
loop turns on, so only a stuck loop misses this many)."""
STALE_MIN_S = 5.0


def stale_after_s(settings: FleetSettings) -> float:
    return max(STALE_POLLS * settings.poll_delay_s, STALE_MIN_S)


def worker_checks(settings: FleetSettings, worker: FleetWorker) -> HealthChecks:
    """The checks of one worker process: its poll loop, its Redis pool and the store."""
    return HealthChecks(
        "worker",
        worker.runtime.redis,
        settings.store,
        stale_after_s(settings),
        turn_age_s=lambda: time.monotonic() - worker.polled_at_s,
    )
