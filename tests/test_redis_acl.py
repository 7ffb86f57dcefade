"""deploy/redis/users.acl loaded by a real redis-server: each user can do its part of the fleet's work and
nothing the others do (the submitter cannot claim, the monitor cannot write)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from redis.asyncio import Redis as AsyncRedis

from service.client.client import TunefleetClient
from service.core import keys
from service.core.models.tuning import LlmAdapter
from service.core.settings import FleetSettings
from service.metrics import fleet_snapshot
from service.watch.snapshot import take_snapshot
from tests.support.acl_redis import PASSWORDS, AclRedis, role_env, role_settings
from tests.support.acl_redis import acl_redis as acl_redis  # the fixture
from tests.support.cli import tunefleet
from tests.support.fleet import Fleet, case, case_folder, wait_until, write_tuning
from tests.support.goals import start_goal, wait_goal_ended, write_goal
from tests.support.keda import COUNT_QUEUE
from tests.support.redis_server import free_port
from tests.support.tools import needs_tool
from workers.adapters.llm.limits import ProviderLimits
from workers.claim import CLAIM, claim_arguments

pytestmark = needs_tool("sha256sum")


async def test_each_user_does_its_part_of_a_tuning_without_a_denial(
    acl_redis: AclRedis, settings: FleetSettings, tmp_path: Path
) -> None:
    """The daemon and submission as `submitter`, a worker as `worker` and `tunefleet status` as `monitor`
    take a gated tuning with applies and a goal to the end, the daemon's API and both /readyz answer 200,
    `pause`, `resume`, `submit`, `cancel` and `gc --apply` (every age 0: it retires the gate's evaluations
    from Redis) work as `submitter`, and Redis's ACL log records no denial."""
    submitter = role_settings(settings, acl_redis, "submitter").model_copy(
        update={"api_port": free_port(), "api_public_read": True}
    )
    fleet = Fleet(submitter, tmp_path / "logs")
    worker = role_settings(settings, acl_redis, "worker").model_copy(update={"health_port": free_port()})
    workers = Fleet(worker, tmp_path / "worker-logs")
    try:
        cases = [case("pass"), case("one-apply", rules=["one-apply-a"]), case("flawed", flawed=True)]
        # A gate on a regression folder, so that `gc --apply` below retires its evaluations from Redis
        # (HDEL) as the submitter.
        case_folder(tmp_path / "t" / "regress", [case("kept")])
        gate = {"cases": "folder", "folder": "regress", "rule": "strict"}
        tuning = write_tuning(tmp_path / "t", cases, gate=gate)
        await fleet.start_tuning(tuning)
        fleet.start_daemon(tuning)
        workers.start_worker()
        try:
            rows = await fleet.wait_finished(3, timeout_s=60)
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
        done = tunefleet(*command, env=role_env(submitter), timeout_s=30)
        assert done.returncode == 0, (command, done.stderr)
    assert fleet.results()["late"].state == "cancelled"
    ages = {f"TUNEFLEET_RETENTION_{w}_AGE_S": "0" for w in ("SNAPSHOT", "CANDIDATE", "EVAL_ITEM", "VOID")}
    done = tunefleet("gc", "--apply", "--json", env={**role_env(submitter), **ages}, timeout_s=60)
    assert done.returncode == 0, (done.stderr, acl_redis.denials("submitter"))
    retired = [r for r in json.loads(done.stdout)["removals"] if r["kind"] == "eval_redis"]
    assert retired, done.stdout  # the gate's evaluations left Redis (HDEL) under the submitter's ACL
    monitor = role_settings(settings, acl_redis, "monitor")
    status = tunefleet("status", "--json", env=role_env(monitor), timeout_s=30)
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


def _claim_args(worker: str) -> list[str | int]:
    """The claim script's arguments (workers.claim) for one free slot of `worker`."""
    return claim_arguments(100, worker, 1, 10_000, 10_000, [])


def test_the_submitter_can_enqueue_but_cannot_claim(acl_redis: AclRedis) -> None:
    """The submitter may add a job to the queue, but neither the worker's claim script nor a direct write
    of arq's in-progress key or a case's lease is allowed to it."""
    job_id = "case:t1:c1:1"
    with acl_redis.client("submitter") as r:
        r.zadd("tf:queue", {job_id: 1})
        r.set(keys.arq_job(job_id), b"{}")  # the job record (its bytes do not matter here)
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
        assert claimed == [job_id.encode(), b"1", b"", 1, b"{}"]


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


async def test_the_scaler_counts_queued_and_running_cases_and_nothing_else(
    acl_redis: AclRedis, settings: FleetSettings, tmp_path: Path
) -> None:
    """As `scaler`, the queue-length script KEDA runs counts every case of a tuning, the running ones with
    the waiting ones (arq keeps a running job in its sorted set), while one worker of one slot runs one
    of them; the scaler can write nothing, read no other key and run no script that writes."""
    submitter = role_settings(settings, acl_redis, "submitter")
    worker = role_settings(settings, acl_redis, "worker")
    fleet, workers = Fleet(submitter, tmp_path / "logs"), Fleet(worker, tmp_path / "worker-logs")
    try:
        cases = [case(f"slow-{n}") for n in range(4)]
        slow = {"kind": "demo", "seed": 1, "latency": {"run_ms": 30_000, "analyze_ms": 0, "apply_ms": 0}}
        await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=slow))
        workers.start_worker(concurrency=1)
        with acl_redis.client("admin") as admin:
            await wait_until(lambda: len(admin.keys("tf:lease:*")) == 1, 30, "one case running")
        with acl_redis.client("scaler") as r:
            assert r.eval(COUNT_QUEUE, 1, settings.queue) == 4
            for command in [
                ("ZADD", settings.queue, 1, "x"),
                ("GET", keys.paused()),
                ("EVAL", "return redis.call('ZREM', KEYS[1], 'x')", 1, settings.queue),
                ("EVAL", "return redis.call('GET', KEYS[1])", 1, keys.paused()),
            ]:
                with pytest.raises((redis.exceptions.NoPermissionError, redis.exceptions.ResponseError)):
                    r.execute_command(*command)
    finally:
        fleet.teardown()
        workers.teardown()


async def test_the_worker_hands_llm_permits_on_without_a_denial(acl_redis: AclRedis) -> None:
    """As `worker`, two processes' calls to one provider (concurrency 1) queue for its permit and are
    handed it one after the other through the grants channel; Redis's ACL log records no denial."""
    config = LlmAdapter(
        kind="llm", base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, concurrency=1
    )
    password = PASSWORDS["worker"]
    connections = [AsyncRedis.from_url(acl_redis.url("worker"), password=password) for _ in range(2)]
    processes = [ProviderLimits(c, config, poll_s=(30.0, 30.0)) for c in connections]
    order: list[int] = []

    async def call(n: int) -> None:
        async with processes[n % 2].call():
            order.append(n)

    try:
        async with asyncio.timeout(10):
            async with processes[0].call():
                waiters = [asyncio.create_task(call(n)) for n in (1, 2)]
                with acl_redis.client("admin") as admin:
                    while admin.zcard(keys.llm_waiters(processes[0].provider)) < 2:
                        await asyncio.sleep(0.01)
            await asyncio.gather(*waiters)
            for limits in processes:
                await limits.aclose()
    finally:
        for connection in connections:
            await connection.aclose()
    assert sorted(order) == [1, 2]
    assert acl_redis.denials("worker") == []
