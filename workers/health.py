"""A worker's health endpoints: alive while its poll loop turns, ready while Redis and the store are."""

from __future__ import annotations

import time

from service.core.io.connection import COMMAND_RETRIES
from service.core.io.health import HealthChecks
from service.core.settings import FleetSettings
from workers.fleet_worker import FleetWorker

STALE_POLLS = 25
"""Polls a worker may miss before it is not alive."""
STALE_MIN_S = 5.0
BACKOFF_S = 2.0
"""What a command's retries wait between attempts, at most, in all (service.core.io.connection's backoff)."""


def redis_stall_s(settings: FleetSettings) -> float:
    """The longest one poll may wait on an unreachable Redis before it fails and the loop turns on:
    every attempt's connect timeout, or with Sentinels the failover wait. Redis being away is what
    /readyz reports; /healthz must not fail for it, or an orchestrator would restart healthy workers
    in the middle of an outage or a failover."""
    connect_s = max(1, round(settings.redis_connect_timeout_s))
    if settings.redis_sentinels:
        return settings.redis_failover_wait_s + connect_s
    return (COMMAND_RETRIES + 1) * connect_s + BACKOFF_S


def stale_after_s(settings: FleetSettings) -> float:
    """How old the poll loop's last turn may be while the worker counts as alive."""
    return max(STALE_POLLS * settings.poll_delay_s, STALE_MIN_S) + redis_stall_s(settings)


def worker_checks(settings: FleetSettings, worker: FleetWorker) -> HealthChecks:
    """The checks of one worker process: its poll loop, its Redis pool and the store."""
    return HealthChecks(
        "worker",
        worker.runtime.redis,
        settings.store,
        stale_after_s(settings),
        turn_age_s=lambda: time.monotonic() - worker.polled_at_s,
    )
