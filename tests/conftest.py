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
    """Short leases and polls, so that faults play out in seconds. A lease is renewed every third of
    lease_s, so a worker stalled for two thirds of it loses its cases: 3 s rides out the stalls of a
    loaded 2-core machine running the tests side by side (at 1.5 s, workers lost leases they held)."""
    return FleetSettings(
        redis_url=redis_server.url,
        store=tmp_path / "store",
        poll_delay_s=0.05,
        lease_s=3.0,
        stop_grace_s=3.0,
        lock_lease_s=3.0,
        breaker_probe_base_s=0.5,
        breaker_probe_max_s=2.0,
        reconcile_interval_s=1.0,
        wait_for_apply_max_s=5.0,
        redis_connect_attempts=3,
        # The tests' agents run this virtualenv's Python, which other users may not reach (/root is
        # private): as root, their workers run agents as root. tests/test_hostile_agents.py runs its
        # agents as nobody, the default.
        agent_uid=0,
    )


@pytest.fixture
def fleet(settings: FleetSettings, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(settings, tmp_path / "logs")
    yield f
    f.teardown()
