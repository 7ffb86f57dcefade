"""deploy/redis/users.acl loaded by a real redis-server: each user can do its part of the fleet's work and
nothing the others do (the submitter cannot claim, the monitor cannot write)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis
import yaml
from pydantic import SecretStr

from service.client.client import TunefleetClient
from service.core import keys
from service.core.settings import FleetSettings
from service.metrics import fleet_snapshot
from service.watch.snapshot import take_snapshot
from tests.support.fleet import Fleet, case, settings_env, wait_until, write_tuning
from tests.support.goals import start_goal, wait_goal_ended, write_goal
from tests.support.redis_proc import RedisProcess
from tests.support.redis_server import free_port
from tests.support.tools import needs_tool
from workers.claim import CLAIM

ROOT = Path(__file__).resolve().parent.parent
ACL_DIR = ROOT / "deploy" / "redis"
PASSWORDS = {"worker": "w-pass-1", "submitter": "s-pass-2", "monitor": "m-pass-3"}
ADMIN = "admin-pass-4"
"""A test-only administrator (appended to the rendered file) reads the ACL log."""

pytestmark = needs_tool("sha256sum")


@dataclass
class AclRedis:
    server: RedisProcess

    def url(self, user: str) -> str:
        return f"redis://{user}@127.0.0.1:{self.server.port}/0"

    def client(self, user: str) -> redis.Redis:
        password = ADMIN if user == "admin" else PASSWORDS[user]
        return redis.Redis(port=self.server.port, username=user, password=password)

    def denials(self, user: str) -> list[dict[str, Any]]:
        with self.client("admin") as admin:
            log = cast(list[dict[str, Any]], admin.acl_log())
        return [e for e in log if e["username"] == user]


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[AclRedis]:
    env = {**os.environ, **{f"REDIS_ACL_{u.upper()}_PASSWORD": p for u, p in PASSWORDS.items()}}
    rendered = subprocess.run(
        [str(ACL_DIR / "render-acl.sh"), str(ACL_DIR / "users.acl")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(p not in rendered for p in PASSWORDS.values()), "passwords are stored hashed"
    acl = tmp_path / "users.acl"
    acl.write_text(rendered + f"user admin on >{ADMIN} ~* &* +@all\n")
    port = free_port()
    server = RedisProcess(
        tmp_path / "redis",
        port,
        ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--aclfile", str(acl)],
    )
    server.start()
    yield AclRedis(server)
    server.stop()


def role_settings(base: FleetSettings, acl: AclRedis, user: str) -> FleetSettings:
    """The user named in the URL, its password in the password setting (as a deployment would)."""
    update = {"redis_url": acl.url(user), "redis_password": SecretStr(PASSWORDS[user])}
    return base.model_copy(update=update)


def role_env(settings: FleetSettings) -> dict[str, str]:
    return {**os.environ, **settings_env(settings), "TUNEFLEET_LOG_FORMAT": "json"}


async def test_each_user_does_its_part_of_a_tuning_without_a_denial(
    acl_redis: AclRedis, settings: FleetSettings, tmp_path: Path
) -> None:
    """The daemon and submission as `submitter`, a worker as `worker` and `tunefleet status` as `monitor`
    take a tuning with applies and a goal to the end, the daemon's API and both /readyz answer 200, `pause`,
    `resume`, `submit` and `cancel` work as `submitter`, and Redis's ACL log records no denial."""
    submitter = role_settings(settings, acl_redis, "submitter").model_copy(
        update={"api_port": free_port(), "api_public_read": True}
    )
    fleet = Fleet(submitter, tmp_path / "logs")
    worker = role_settings(settings, acl_redis, "worker").model_copy(update={"health_port": free_port()})
    workers = Fleet(worker, tmp_path / "worker-logs")
    try:
        cases = [case("pass"), case("one-apply", rules=["one-apply-a"]), case("flawed", flawed=True)]
        tuning = write_tuning(tmp_path / "t", cases)
        await fleet.start_tuning(tuning)
        fleet.start_daemon(tuning)
        workers.start_worker()
        try:
            rows = await fleet.wait_finished(3, timeout_s=30)
        except AssertionError as exc:
            refused = {u: acl_redis.denials(u) for u in PASSWORDS}
            raise AssertionError(f"{exc}; ACL denials: {refused}") from None
        assert {r.case: r.state for r in rows.values()} == {
            "pass": "completed",
            "one-apply": "completed",
            "flawed": "difficult",
        }
        await start_goal(fleet, write_goal(tmp_path / "goals", demo={"step_ms": 0}))  # as submitter
        assert (await wait_goal_ended(fleet, timeout_s=30)).status == "completed"
        api = f"http://127.0.0.1:{submitter.api_port}"
        health = f"http://127.0.0.1:{worker.health_port}/readyz"
        urls = [api + "/api/status", api + "/metrics", api + "/readyz", health]
        await wait_until(lambda: all(_ok(url) for url in urls), 20, "the daemon's API and both readiness")
    finally:
        workers.teardown()
        fleet.teardown()
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "late.yaml").write_text(yaml.safe_dump(case("late")))
    for command in (
        ["pause"],
        ["resume"],
        ["submit", str(extra), "--tuning", "t1"],
        ["cancel", "t1", "late"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "service", *command],
            env=role_env(submitter),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, (command, done.stderr)
    assert fleet.results()["late"].state == "cancelled"
    monitor = role_settings(settings, acl_redis, "monitor")
    status = subprocess.run(
        [sys.executable, "-m", "service", "status", "--json"],
        env=role_env(monitor),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert status.returncode == 0, status.stderr
    async with TunefleetClient(monitor) as client:  # what `tunefleet watch` and the metrics read
        view = await take_snapshot(client.redis, monitor.queue, event_count=20)
        await fleet_snapshot(client.redis, monitor.queue)
    assert len(view.events) == 20
    assert '"queue_depth": 0' in status.stdout.replace('"queue_depth":0', '"queue_depth": 0')
    for user in PASSWORDS:
        assert acl_redis.denials(user) == [], f"{user} was refused something it needs"


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _claim_args(worker: str) -> list[object]:
    """The claim script's arguments (workers.claim.Claimer) for one free slot of `worker`."""
    prefixes = [keys.arq_in_progress(""), keys.lease(""), keys.holder(""), keys.suspect("")]
    return [
        10**13,
        10_000,
        100,
        worker,
        1,
        10_000,
        0,
        "0",
        *prefixes,
        keys.worker_cases(""),
        keys.worker_suspects(""),
    ]


def test_the_submitter_can_enqueue_but_cannot_claim(acl_redis: AclRedis) -> None:
    """The submitter may add a job to the queue, but neither the worker's claim script nor a direct write
    of arq's in-progress key or a case's lease is allowed to it."""
    job_id = "case:t1:c1:1"
    with acl_redis.client("submitter") as r:
        r.zadd("tf:queue", {job_id: 1})
        assert r.zscore("tf:queue", job_id) == 1
        with pytest.raises(redis.exceptions.NoPermissionError, match="permissions to access one of the keys"):
            r.eval(CLAIM, 2, "tf:queue", keys.free_slots(), *_claim_args("submitter"))
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.set(keys.arq_in_progress(job_id), "1", px=10_000)
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.set(keys.lease(job_id), "7", px=10_000)
        assert r.exists(keys.lease(job_id)) == 0  # reading leases (reconciliation) is allowed
    with acl_redis.client("worker") as r:
        claimed = r.eval(CLAIM, 2, "tf:queue", keys.free_slots(), *_claim_args("w1"))
        assert claimed == [job_id.encode(), b"1", b""]


def test_the_monitor_reads_but_cannot_write(acl_redis: AclRedis) -> None:
    """The monitor reads the fleet's keys; every write (a pause, an event, a queue entry, a script) is
    refused, and so are commands that are neither (FLUSHALL, KEYS, CONFIG)."""
    with acl_redis.client("worker") as r:
        r.hset(keys.breaker(), "state", "closed")
    with acl_redis.client("monitor") as r:
        assert r.hget(keys.breaker(), "state") == b"closed"
        assert r.zcard("tf:queue") == 0
        writes: list[tuple[Any, ...]] = [
            ("SET", keys.paused(), "1"),
            ("XADD", keys.events(), "*", "event", "{}"),
            ("ZADD", "tf:queue", 1, "x"),
            ("EVAL", "return 1", 0),
            ("FLUSHALL",),
            ("KEYS", "*"),
            ("CONFIG", "GET", "*"),
        ]
        for command in writes:
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.execute_command(*command)
    with acl_redis.client("admin") as admin:
        assert admin.exists(keys.paused()) == 0


def test_the_default_user_is_off(acl_redis: AclRedis) -> None:
    """A client without a user name is refused: the default user is off."""
    with redis.Redis(port=acl_redis.server.port) as r, pytest.raises(redis.exceptions.AuthenticationError):
        r.ping()
