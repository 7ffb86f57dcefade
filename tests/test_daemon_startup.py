"""The daemon starts cleanly or fails in one error line, having registered and queued nothing (issue 12,
item 9): a busy port, a second daemon on the same Redis, bad settings, a bad Redis address, Redis errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.core import keys
from service.core.settings import FleetSettings
from tests.support.cli import tunefleet
from tests.support.fleet import case, settings_env, wait_until, write_tuning
from tests.support.redis_server import RedisServer, free_port


def cli_env(settings: FleetSettings, log_format: str = "console", **extra: str) -> dict[str, str]:
    env = {**os.environ, **settings_env(settings), "TUNEFLEET_LOG_FORMAT": log_format, **extra}
    env.pop("TUNEFLEET_CONFIG", None)
    return env


def only_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The process failed with exit code 2 and wrote one line, an `error:` line, to stderr; its text."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]


def nothing_registered(settings: FleetSettings, redis_server: RedisServer, name: str = "t1") -> None:
    assert not (settings.store / "tunings" / name).exists()
    assert [job for job in redis_server.zmembers(settings.queue) if job.startswith(f"case:{name}:")] == []
    assert not redis_server.client().sismember(keys.tunings(), name)


def tuning_file(tmp_path: Path, name: str = "t1") -> Path:
    return write_tuning(tmp_path / name, [case("c0"), case("c1")], name=name)


def test_a_busy_port_fails_in_one_line_before_registering(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A daemon whose API port is taken says so in one `error:` line and registers and queues nothing."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = cli_env(settings, TUNEFLEET_API_PORT=str(port))
        line = only_error_line(tunefleet("daemon", str(tuning_file(tmp_path)), env=env))
    assert f"127.0.0.1:{port}" in line
    nothing_registered(settings, redis_server)
    assert redis_server.get(keys.daemon()) is None


def test_the_error_line_is_json_when_logs_are(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """With JSON logs, the daemon's one failure line is a JSON record at level error naming the port."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = cli_env(settings, "json", TUNEFLEET_API_PORT=str(port))
        done = tunefleet("daemon", str(tuning_file(tmp_path)), env=env)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "error" and f"127.0.0.1:{port}" in record["error"]
    nothing_registered(settings, redis_server)


async def test_a_second_daemon_on_the_same_redis_is_refused(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """While one daemon serves a Redis, a second is refused in one line naming the first, and registers
    nothing; once the first stops on SIGTERM, it gives its lease back and a daemon starts at once."""
    first_env = cli_env(settings, TUNEFLEET_API_PORT=str(free_port()))
    first = subprocess.Popen(
        [sys.executable, "-m", "service", "daemon", str(tuning_file(tmp_path, "t1"))],
        env=first_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until(lambda: redis_server.zcard(settings.queue) == 2, 30, "the first daemon's cases")
        holder = json.loads(redis_server.get(keys.daemon()) or b"{}")
        assert holder["pid"] == first.pid
        second_env = cli_env(settings, TUNEFLEET_API_PORT=str(free_port()))
        line = only_error_line(tunefleet("daemon", str(tuning_file(tmp_path, "t2")), env=second_env))
        assert "another daemon" in line and f"pid {first.pid}" in line
        nothing_registered(settings, redis_server, "t2")
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    assert redis_server.get(keys.daemon()) is None
    again = tunefleet("daemon", "--once", str(tuning_file(tmp_path, "t2")), env=cli_env(settings))
    assert again.returncode == 0, again.stderr
    assert (settings.store / "tunings" / "t2").exists()


BAD_SETTINGS: dict[str, tuple[dict[str, str | None], str]] = {
    "malformed settings YAML": ({"config": "api_port: [8321\n"}, "not valid YAML at line"),
    "settings YAML not a mapping": ({"config": "- api_port\n"}, "must hold a mapping"),
    "unknown setting in YAML": ({"config": "api_prot: 1\n"}, "api_prot"),
    "missing --config file": ({"config": None}, "does not exist"),
    "invalid Redis URL": ({"TUNEFLEET_REDIS_URL": "http://127.0.0.1:6379/0"}, "is not a Redis URL"),
    "Redis URL with a bad port": ({"TUNEFLEET_REDIS_URL": "redis://127.0.0.1:63x9/0"}, "is not a Redis URL"),
    "sentinel without a port": ({"TUNEFLEET_REDIS_SENTINELS": '["sentinel-1"]'}, "is not host:port"),
    "concurrency 0 in the environment": ({"TUNEFLEET_CONCURRENCY": "0"}, "TUNEFLEET_CONCURRENCY"),
    "empty API token": ({"TUNEFLEET_API_TOKEN": ""}, "api_token (TUNEFLEET_API_TOKEN) is empty"),
    "short read token": ({"TUNEFLEET_API_READ_TOKEN": "x" * 15}, "has 15 characters: it needs at least 16"),
}


@pytest.mark.parametrize("mistake", list(BAD_SETTINGS), ids=lambda m: m.replace(" ", "-"))
def test_a_settings_mistake_is_one_error_line(
    mistake: str, settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Each settings mistake stops the daemon in one `error:` line naming it, with nothing registered."""
    given, expected = BAD_SETTINGS[mistake]
    env = cli_env(settings, TUNEFLEET_API_PORT=str(free_port()))
    args = []
    if "config" in given:
        path = tmp_path / "settings.yaml"
        text = given["config"]
        if text is not None:
            path.write_text(text)
        args = ["--config", str(path)]
    env |= {k: v for k, v in given.items() if k != "config" and v is not None}
    line = only_error_line(tunefleet(*args, "daemon", str(tuning_file(tmp_path)), env=env))
    assert expected in line
    nothing_registered(settings, redis_server)


def test_a_worker_of_no_slots_is_refused(settings: FleetSettings) -> None:
    """`tunefleet worker --concurrency 0` is refused in one `error:` line instead of starting."""
    line = only_error_line(tunefleet("worker", "--concurrency", "0", env=cli_env(settings)))
    assert "--concurrency must be 1 or more (got 0)" in line


def test_a_redis_error_after_connecting_is_one_line(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A Redis that connects but answers writes with an error (out of memory) stops the daemon in one line."""
    admin = redis_server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")
    try:
        env = cli_env(settings, TUNEFLEET_API_PORT=str(free_port()))
        line = only_error_line(tunefleet("daemon", str(tuning_file(tmp_path)), env=env))
    finally:
        admin.config_set("maxmemory", "0")
    assert "Redis answered with an error" in line
    assert "maxmemory" in line
    assert redis_server.zcard(settings.queue) == 0


@pytest.mark.parametrize("command", [["status"], ["worker"], ["pause"], ["resume"]], ids=" ".join)
def test_every_command_refuses_a_bad_redis_url_in_one_line(
    command: list[str], settings: FleetSettings
) -> None:
    """Not only the daemon: any command given a URL that names no Redis says so in one `error:` line."""
    env = cli_env(settings, TUNEFLEET_REDIS_URL="http://127.0.0.1:6379/0")
    line = only_error_line(tunefleet(*command, env=env))
    assert "is not a Redis URL" in line


def start_daemon(env: dict[str, str], tuning: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service", "daemon", str(tuning)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def holder_pid(redis_server: RedisServer) -> int | None:
    raw = redis_server.get(keys.daemon())
    return None if raw is None else int(json.loads(raw)["pid"])


async def wait_in_charge(redis_server: RedisServer, daemon: subprocess.Popen[str]) -> None:
    """Wait until `daemon` holds the lease and has renewed it once: its start (registering its tuning,
    which renews nothing) is behind it, so a slow start on a loaded machine cannot let the lease lapse
    later in the test."""
    await wait_until(lambda: holder_pid(redis_server) == daemon.pid, 30, "the daemon's lease")
    with redis_server.client() as r:
        ttls_ms = [int(r.pttl(keys.daemon()))]

        def renewed() -> bool:  # the lease's time to live went up between two looks
            ttls_ms.append(int(r.pttl(keys.daemon())))
            return ttls_ms[-1] > ttls_ms[-2]

        await wait_until(renewed, 30, "the daemon to renew its lease")
    assert holder_pid(redis_server) == daemon.pid


async def test_a_frozen_daemon_loses_its_lease_and_stops(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A daemon frozen past `daemon_lease_s` loses the fleet to a new daemon; thawed, it finds its lease
    taken and stops with one error line saying so, leaving the new daemon in charge."""
    lease = {"TUNEFLEET_DAEMON_LEASE_S": "2"}  # renewed every 0.67 s: a loaded machine's stalls ride it out
    first = start_daemon(cli_env(settings, TUNEFLEET_API_PORT="0", **lease), tuning_file(tmp_path, "t1"))
    second: subprocess.Popen[str] | None = None
    try:
        await wait_in_charge(redis_server, first)
        first.send_signal(signal.SIGSTOP)
        await wait_until(lambda: holder_pid(redis_server) is None, 10, "the frozen daemon's lease to lapse")
        second = start_daemon(cli_env(settings, TUNEFLEET_API_PORT="0", **lease), tuning_file(tmp_path, "t2"))
        await wait_in_charge(redis_server, second)
        first.send_signal(signal.SIGCONT)
        assert first.wait(30) == 2
        _, err = first.communicate()
        assert err.splitlines()[-1].startswith("error: this daemon lost its lease to another")
        assert f"pid {second.pid}" in err.splitlines()[-1]
        assert second.poll() is None and holder_pid(redis_server) == second.pid
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()
        if second is not None:
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"TUNEFLEET_CONCURRENCY": "0"}, [], "concurrency (TUNEFLEET_CONCURRENCY): Input should be greater"),
        ({}, ["--concurrency", "0"], "--concurrency: concurrency (TUNEFLEET_CONCURRENCY)"),
        ({"TUNEFLEET_REDIS_URL": "nope://x"}, [], "redis_url 'nope://x' is not a Redis URL"),
        ({"TUNEFLEET_CONFIG": "/nonexistent/settings.yaml"}, [], "settings file /nonexistent/settings.yaml"),
    ],
    ids=["setting", "option", "redis-url", "config"],
)
def test_python_m_workers_refuses_bad_settings_in_one_line(
    settings: FleetSettings, env: dict[str, str], args: list[str], expected: str
) -> None:
    """`python -m workers` (what `tunefleet worker` becomes) refuses a settings mistake in one line too."""
    done = subprocess.run(
        [sys.executable, "-m", "workers", *args],
        env=cli_env(settings) | env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert expected in only_error_line(done)


async def test_the_lease_is_renewed_while_a_long_start_registers(
    settings: FleetSettings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A start that registers more cases than fit in one `daemon_lease_s` keeps the lease all along: from
    its first registration to the last case queued, `tf:daemon` names this daemon at every look."""
    count = 5000
    tuning = write_tuning(tmp_path / "big", [case(f"c{i:04d}") for i in range(count)], name="big")
    lease_s = 1.5  # renewed every 0.5 s: rides out a one-second stall of a loaded 2-core machine
    env = cli_env(settings, TUNEFLEET_API_PORT="0", TUNEFLEET_DAEMON_LEASE_S=str(lease_s))
    daemon = start_daemon(env, tuning)
    holders: list[int | None] = []
    try:
        await wait_until(lambda: holder_pid(redis_server) == daemon.pid, 30, "the daemon's lease")
        started = time.monotonic()

        def all_queued() -> bool:
            holders.append(holder_pid(redis_server))
            return redis_server.zcard(settings.queue) >= count

        await wait_until(all_queued, 120, "every case queued", interval_s=0.02)
        start_s = time.monotonic() - started
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, daemon.communicate()[1]
    assert start_s > 2 * lease_s, f"the start took {start_s:.2f} s: too short to prove a renewal"
    assert set(holders) == {daemon.pid}, "the lease lapsed or changed hands during the start"
