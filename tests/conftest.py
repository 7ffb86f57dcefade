"""Fixtures: a private redis-server per test, fleet settings with short leases, worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.core.settings import FleetSettings
from tests.support.fleet import Fleet
from tests.support.redis_server import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> FleetSettings:
    return FleetSettings(
        redis_url=redis_server.url,
        store=tmp_path / "store",
        poll_delay_s=0.05,
        lease_s=1.5,
        stop_grace_s=3.0,
        lock_lease_s=3.0,
        breaker_probe_base_s=0.5,
        breaker_probe_max_s=2.0,
        reconcile_interval_s=1.0,
        wait_for_apply_max_s=5.0,
        redis_connect_attempts=3,
    )


@pytest.fixture
def fleet(settings: FleetSettings, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(settings, tmp_path / "logs")
    yield f
    f.teardown()
