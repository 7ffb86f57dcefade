"""A full store is an outage, not a crash loop: on a real small disk (a tmpfs, tests/support/small_disk)
filled in the middle of a tuning, the workers stop claiming, say so once, hand their jobs back without
marking them, and go on once the disk has room again."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from service.core import keys
from service.core.io.health import daemon_checks
from service.core.models.health import Readiness
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning
from tests.support.redis_server import RedisServer
from tests.support.small_disk import fill, small_disk
from workers.errors import JobFault
from workers.store_full import outage_of

CASES = [case(f"pass-{i}") for i in range(12)] + [case(f"apply-{i}", rules=[f"rule-{i}"]) for i in range(4)]
FULL_FOR_S = 6.0


def stream_events(redis_server: RedisServer) -> list[dict[str, Any]]:
    """Every event in the fleet's stream (the fleet's own events have no line in a tuning's file)."""
    with redis_server.client() as redis:
        entries = redis.xrange(keys.events())
    return [json.loads(fields[b"event"]) for _, fields in entries]


async def ready(redis_server: RedisServer, fleet: Fleet) -> Readiness:
    """What /readyz says now (the checks behind it, on a connection of their own)."""
    redis = Redis.from_url(redis_server.url)
    try:
        return await daemon_checks(redis, fleet.settings.store).readiness()
    finally:
        await redis.aclose()


def ended(fleet: Fleet) -> int:
    return sum(row.state != "unfinished" for row in fleet.results().values())


def error_lines(fleet: Fleet) -> list[dict[str, Any]]:
    lines = [json.loads(raw) for raw in fleet.log_of(0).splitlines() if raw.startswith("{")]
    return [line for line in lines if line.get("level") in ("error", "critical")]


@pytest.fixture
def disk_fleet(settings: FleetSettings, tmp_path: Path) -> Any:
    with small_disk(tmp_path / "disk", 64) as disk:
        fleet = Fleet(settings.model_copy(update={"store": disk / "store"}), tmp_path / "logs")
        try:
            yield fleet
        finally:
            fleet.teardown()


async def test_a_store_filled_mid_tuning_is_an_outage_every_case_ends_as_declared(
    disk_fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With the store's 64 MB disk filled for FULL_FOR_S seconds while 16 demo cases are tuned: one
    `store_full` and one `store_recovered` event, `status` names the outage and /readyz's checks say
    the store is not writable while it lasts, no error-level log line at all, and every case ends
    `completed` as declared with no try spent for the outage (one try of each phase it ran)."""
    fleet = disk_fleet
    slow = demo_adapter(run_ms=150, analyze_ms=50, apply_ms=50)
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES, adapter=slow))
    fleet.start_worker(4)
    await wait_until(lambda: ended(fleet) >= 2, 60, "2 cases to end")
    filler = fleet.settings.store.parent / "filler"
    assert fill(filler) > 0
    await wait_until(
        lambda: any(e["kind"] == "store_full" for e in stream_events(redis_server)), 30, "store_full"
    )
    async with fleet.client() as client:
        status = await client.status()
    assert status.store_full is not None and "No space left on device" in status.store_full
    readiness = await ready(redis_server, fleet)
    assert not readiness.ready and any("No space left" in r for r in readiness.reasons), readiness
    await asyncio.sleep(FULL_FOR_S)  # the outage's length: the fault, held, not a wait for a state
    filler.unlink()
    rows = await fleet.wait_finished(len(CASES), timeout_s=120)
    assert {name: row.state for name, row in rows.items()} == {c["id"]: "completed" for c in CASES}
    kinds = [e["kind"] for e in stream_events(redis_server)]
    assert (kinds.count("store_full"), kinds.count("store_recovered")) == (1, 1)
    assert error_lines(fleet) == []
    async with fleet.client() as client:
        assert (await client.status()).store_full is None
    cases = fleet.settings.store / "tunings" / "t1" / "cases"
    tries = {
        c["id"]: sorted(p.name for p in (cases / c["id"] / "r1" / "nomem").iterdir() if p.name.isdigit())
        for c in CASES
    }
    assert tries == {c["id"]: ["1"] if c["id"].startswith("pass") else ["1", "2"] for c in CASES}


async def test_redis_at_maxmemory_mid_tuning_is_an_outage_every_case_ends_as_declared(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With Redis at its `maxmemory` under `noeviction` for FULL_FOR_S seconds while 16 demo cases are
    tuned: `status` and /readyz's checks say Redis is full, the workers log it as a warning
    (`redis_full`, or Redis unreachable), not error tracebacks, and every case ends `completed` as
    declared once Redis has room again."""
    slow = demo_adapter(run_ms=150, analyze_ms=50, apply_ms=50)
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES, adapter=slow))
    fleet.start_worker(4)
    await wait_until(lambda: ended(fleet) >= 2, 60, "2 cases to end")
    with redis_server.client() as redis:
        used = int(redis.info("memory")["used_memory"])
        redis.config_set("maxmemory-policy", "noeviction")
        redis.config_set("maxmemory", str(used - 100_000))  # below what it holds: no write fits
        began = time.monotonic()
        async with fleet.client() as client:
            status = await client.status()
        readiness = await ready(redis_server, fleet)
        await asyncio.sleep(FULL_FOR_S - (time.monotonic() - began))  # the outage's length, held
        redis.config_set("maxmemory", "0")
    assert status.redis_full is not None and "maxmemory" in status.redis_full
    assert not readiness.ready and any("Redis is full" in r for r in readiness.reasons), readiness
    rows = await fleet.wait_finished(len(CASES), timeout_s=120)
    assert {name: row.state for name, row in rows.items()} == {c["id"]: "completed" for c in CASES}
    assert error_lines(fleet) == []


def test_a_full_store_or_redis_is_recognised_through_what_wraps_it(tmp_path: Path) -> None:
    """ENOSPC met on a real full disk is recognised as raised, as the cause of a job's fault and inside
    an exception group; Redis's OOM refusal too; any other error is not an outage."""
    with small_disk(tmp_path / "disk", 1) as disk:
        try:
            fill(disk / "filler")
            (disk / "record.json").write_bytes(b"x" * 65536)
        except OSError as exc:
            met = exc
    try:
        raise JobFault("the record could not be written") from met
    except JobFault as fault:
        wrapped = fault
    group = ExceptionGroup("steps", [ValueError("other"), wrapped])
    oom = ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    assert outage_of(met) is not None and "No space left on device" in outage_of(met)[0]  # type: ignore[index]
    assert outage_of(wrapped) == outage_of(met) and outage_of(group) == outage_of(met)
    assert outage_of(oom) == (f"Redis is full: {oom}", True)
    assert (
        outage_of(OSError(13, "Permission denied")) is None and outage_of(ResponseError("WRONGTYPE")) is None
    )
