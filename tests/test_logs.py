"""Logs: JSON lines off a TTY with the case's context bound, stdlib (arq) records alike, secrets masked."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from service.core import logs
from tests.support.redis_server import free_port


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


def lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_events_carry_the_bound_case_context_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """An event logged inside a case carries tuning, case, phase, attempt and worker as JSON keys."""
    logs.configure("json")
    structlog.contextvars.bind_contextvars(tuning="t1", case="c1", phase="nomem", attempt=2, worker="h:1")
    structlog.get_logger().info("step_finished", step="run", duration_ms=12)
    [event] = lines(capsys.readouterr().err)
    assert event["event"] == "step_finished"
    assert {k: event[k] for k in ("tuning", "case", "phase", "attempt", "worker")} == {
        "tuning": "t1",
        "case": "c1",
        "phase": "nomem",
        "attempt": 2,
        "worker": "h:1",
    }


def test_secret_looking_keys_are_masked(capsys: pytest.CaptureFixture[str]) -> None:
    """Values under keys such as password or api_token never reach the log."""
    logs.configure("json")
    structlog.get_logger().warning("connect_failed", redis_password="hunter2", api_token="tok-123")
    [event] = lines(capsys.readouterr().err)
    assert event["redis_password"] == "***" and event["api_token"] == "***"


def test_stdlib_records_are_rendered_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    """A record from a stdlib logger (as arq writes them) comes out as a JSON line too."""
    logs.configure("json")
    logging.getLogger("arq.worker").warning("job %s expired", "case:t1:c1:1")
    [event] = lines(capsys.readouterr().err)
    assert event["event"] == "job case:t1:c1:1 expired" and event["level"] == "warning"


def test_the_client_library_never_logs_to_stdout() -> None:
    """A program that uses the client without configuring logging gets no log line on its stdout; the
    client's warnings reach stderr through stdlib logging."""
    program = (
        "import asyncio\n"
        "from service.client.client import TunefleetClient\n"
        "from service.core.settings import FleetSettings\n"
        "from service.core.errors import RedisUnavailableError\n"
        "async def main() -> None:\n"
        "    settings = FleetSettings(redis_url=f'redis://127.0.0.1:{PORT}/0', redis_connect_attempts=2)\n"
        "    try:\n"
        "        async with TunefleetClient(settings):\n"
        "            pass\n"
        "    except RedisUnavailableError:\n"
        "        pass\n"
        "asyncio.run(main())\n"
    ).replace("PORT", str(free_port()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == ""
    assert "redis_connect_retry attempt=2" in done.stderr
