"""`tunefleet gc`: dry by default, it says what it would remove and what that frees; with --apply it
removes old snapshots and the cancels of ended jobs, and every read of the tuning answers the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core import keys
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.report import build_report
from tests.support.cli import fleet_env, tunefleet
from tests.support.disk import disk_use
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.redis_server import RedisServer

CASES = [case("pass"), case("one", rules=["one-a"]), case("two", rules=["two-a", "two-b"])]


def json_env(fleet: Fleet, **more: str) -> dict[str, str]:
    """The fleet's settings as the environment, logs as JSON lines."""
    return fleet_env(fleet.settings, TUNEFLEET_LOG_FORMAT="json", **more)


async def reads(fleet: Fleet) -> dict[str, Any]:
    """What a user reads of tuning t1: its results, each case's detail and its report."""
    store = Store(fleet.settings.store)
    async with fleet.client() as client:
        rows = await client.results("t1")
        shown = {row.case: (await client.show("t1", row.case)).model_dump(mode="json") for row in rows}
    report = build_report(store.known_tuning("t1"), EvalFiles(store).folder).model_dump(mode="json")
    return {"results": [r.model_dump(mode="json") for r in rows], "show": shown, "report": report}


def snapshot_names(fleet: Fleet) -> list[str]:
    folder = fleet.settings.store / "tunings" / "t1" / "snapshots"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


async def test_gc_is_dry_by_default_and_apply_removes_only_what_nothing_reads(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """After a tuning whose applies made new versions, and a second tuning cancelled while queued:
    `gc` (dry) lists every snapshot but the current version's and the two cancels, with their bytes and
    inodes, and removes nothing; `gc --apply` removes exactly those (the bytes and inodes freed are
    what it said), keeps the current version's snapshot, and results, `show` and the report answer the
    same as before."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    worker = fleet.start_worker(4)
    await fleet.wait_finished(len(CASES))
    queue = redis_server.client()  # a result is written before its job leaves the queue (FINISH)
    await wait_until(lambda: queue.zcard(fleet.settings.queue) == 0, 30, "the queue to empty")
    worker.terminate()
    worker.wait()
    await fleet.start_tuning(write_tuning(tmp_path / "t2", [case("a"), case("b")], name="t2"))
    async with fleet.client() as client:
        assert len(await client.cancel("t2")) == 2
    before = await reads(fleet)
    with redis_server.client() as redis:
        current = redis.get(keys.version("t1"))
    assert current is not None and current.decode() in snapshot_names(fleet)
    old = [name for name in snapshot_names(fleet) if name != current.decode()]
    assert len(old) >= 2, snapshot_names(fleet)  # the first version's and each apply's but the last
    age = {"TUNEFLEET_RETENTION_SNAPSHOT_AGE_S": "0"}

    dry = tunefleet("gc", "--json", env=json_env(fleet, **age), timeout_s=120)
    assert dry.returncode == 0, dry.stderr
    said = json.loads(dry.stdout)
    assert said["applied"] is False
    packed = [
        r for r in said["removals"] if r["kind"] == "repo_packed"
    ]  # measured on apply: tests/test_gc_reads.py
    said["removals"] = [r for r in said["removals"] if r["kind"] != "repo_packed"]
    assert sorted((r["kind"], r["name"]) for r in said["removals"]) == sorted(
        [("snapshot", name) for name in old] + [("cancelled", f"case:t2:{c}:1") for c in ("a", "b")]
    )
    assert len(snapshot_names(fleet)) == len(old) + 1
    assert redis_server.client().scard(keys.cancelled("t2")) == 2
    assert "would remove" in tunefleet("gc", env=json_env(fleet, **age), timeout_s=120).stdout

    du_before = disk_use(fleet.settings.store)
    done = tunefleet("gc", "--apply", "--json", env=json_env(fleet, **age), timeout_s=120)
    assert done.returncode == 0, done.stderr
    applied = json.loads(done.stdout)
    assert applied["applied"] is True
    assert [r for r in applied["removals"] if r["kind"] != "repo_packed"] == said["removals"]
    assert len(applied["removals"]) == len(said["removals"]) + len(packed)
    du_after = disk_use(fleet.settings.store)
    assert du_before[0] - du_after[0] == sum(r["bytes"] for r in applied["removals"])
    assert du_before[1] - du_after[1] == sum(r["inodes"] for r in applied["removals"])
    assert snapshot_names(fleet) == [current.decode()]
    assert redis_server.client().scard(keys.cancelled("t2")) == 0
    assert await reads(fleet) == before
    again = json.loads(tunefleet("gc", "--json", env=json_env(fleet, **age), timeout_s=120).stdout)
    assert again["removals"] == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("snapshot", "-1"), ("candidate", "-0.5"), ("eval_item", "a week"), ("void", "-86400")],
)
def test_a_bad_retention_value_is_refused_in_one_line_naming_the_field(
    fleet: Fleet, field: str, value: str
) -> None:
    """A negative or non-numeric retention age stops `gc` before it reads anything, in one line that
    names the setting, and removes nothing."""
    before = disk_use(fleet.settings.store)
    env = json_env(fleet, **{f"TUNEFLEET_RETENTION_{field.upper()}_AGE_S": value})
    done = tunefleet("gc", "--apply", env=env, timeout_s=120)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"retention_{field}_age_s" in lines[0], done.stderr
    assert disk_use(fleet.settings.store) == before


async def test_the_daemon_runs_gc_on_its_schedule(
    settings: FleetSettings, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With gc_interval_s set, the daemon removes a tuning's old snapshots once its cases have ended and
    the queue is empty, keeps the current version's, and logs `gc_applied` with what it freed."""
    fleet = Fleet(
        settings.model_copy(update={"gc_interval_s": 0.5, "retention_snapshot_age_s": 0.0}), tmp_path / "logs"
    )
    try:
        tuning = write_tuning(tmp_path / "t", CASES)
        fleet.start_daemon(tuning)
        registered = fleet.settings.store / "tunings" / "t1" / "tuning.json"
        await wait_until(registered.exists, 30, "the daemon to register t1")
        fleet.start_worker(4)
        await fleet.wait_finished(len(CASES))
        current = redis_server.get(keys.version("t1"))
        assert current is not None
        await wait_until(lambda: snapshot_names(fleet) == [current.decode()], 30, "the daemon's gc")
        await wait_until(
            lambda: "gc_applied" in (tmp_path / "logs" / "daemon.log").read_text(), 10, "its log"
        )
    finally:
        fleet.teardown()
