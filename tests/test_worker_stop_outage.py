"""A worker stopped while Redis is unreachable exits cleanly: code 0, a warning and its last line, no
traceback (issue 53)."""

from __future__ import annotations

import json
import signal
import subprocess

from tests.support.fleet import Fleet, wait_until
from tests.support.redis_server import RedisServer


def log_events(fleet: Fleet) -> list[str]:
    lines = fleet.log_of(0).splitlines()
    return [json.loads(line)["event"] for line in lines if line.startswith("{")]


async def test_a_worker_stopped_during_an_outage_exits_cleanly(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    """SIGTERM to a worker whose Redis is down ends it with exit code 0 within the grace period, its log
    saying `worker_presence_left` then `worker_stopped`, and nothing else on its output: no traceback."""
    worker = fleet.start_worker()
    await wait_until(lambda: "worker_started" in log_events(fleet), 30, "the worker started")
    redis_server.stop()
    await wait_until(lambda: "redis_unreachable" in log_events(fleet), 30, "the worker saw the outage")
    worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=fleet.settings.stop_grace_s + 15)
    except subprocess.TimeoutExpired:
        code = None
    output = fleet.log_of(0)
    assert code == 0, output
    assert "Traceback" not in output and all(line.startswith("{") for line in output.splitlines()), output
    events = log_events(fleet)
    assert events[-2:] == ["worker_presence_left", "worker_stopped"], events
