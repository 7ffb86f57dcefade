"""Records written behind (workers.job_run.JobRun.write_behind): a step's record lands while the job's
next agent starts, in the order the records were started, fenced by the lease like any write; a record
that cannot land stops the job at its next wait for them, and nothing started after it lands."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis

from service.core import keys
from service.core.io.connection import connect
from service.core.models.events import EventKind
from service.core.models.records import SandboxTrips, Usage
from service.core.settings import FleetSettings
from workers.errors import LeaseLost
from workers.job_run import JobRun
from workers.runtime import WorkerRuntime

JOB = "case:t1:c1:1"


class Probe(JobRun):
    """A leased job with no kind of its own: only the writes are exercised."""

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        return None

    def unfinished_spend(self, spent: Usage, where: dict[str, Any]) -> None:
        return None

    async def settle_spend(self) -> None:
        return None


async def leased_probe(settings: FleetSettings) -> tuple[Probe, ArqRedis]:
    """A job leased by a runtime on the test's Redis, as a worker's claim would."""
    redis = await connect(settings)
    runtime = WorkerRuntime(settings, redis, name="w1")
    await redis.zadd(settings.queue, {JOB: 0})
    lease, _ = await runtime.acquire(JOB, "t1")
    return Probe(runtime, lease, None, {}), redis


async def test_records_written_behind_land_in_order_before_the_job_goes_on(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """Two records started one after the other both land, each announced after it landed, in their
    order; `write` waits for them before its own."""
    probe, redis = await leased_probe(settings)
    announced: list[str] = []
    try:
        probe.write_behind(tmp_path / "run.json", SandboxTrips(trips=1), then=lambda: announced.append("run"))
        probe.write_behind(
            tmp_path / "feedback.json", SandboxTrips(trips=2), then=lambda: announced.append("fb")
        )
        assert announced == []  # started, not landed: the job went on
        await probe.write(tmp_path / "result.json", SandboxTrips(trips=3))
        assert announced == ["run", "fb"]
        assert [
            SandboxTrips.model_validate_json((tmp_path / n).read_bytes()).trips
            for n in ("run.json", "feedback.json", "result.json")
        ] == [1, 2, 3]
    finally:
        await redis.aclose()


async def test_a_record_that_cannot_land_stops_the_job_and_nothing_after_it_lands(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """Once the lease has moved on, the record written behind is refused: the job's next wait for its
    records raises LeaseLost (once), and the record started after it is never written nor announced."""
    probe, redis = await leased_probe(settings)
    announced: list[str] = []
    try:
        await redis.delete(keys.lease(JOB))  # another worker's now, as far as the fence knows
        probe.write_behind(tmp_path / "run.json", SandboxTrips(trips=1), then=lambda: announced.append("run"))
        probe.write_behind(
            tmp_path / "feedback.json", SandboxTrips(trips=2), then=lambda: announced.append("fb")
        )
        with pytest.raises(LeaseLost):
            await probe.landed()
        await probe.landed()  # reported once
        assert announced == []
        assert not (tmp_path / "run.json").exists() and not (tmp_path / "feedback.json").exists()
    finally:
        await redis.aclose()


async def test_a_record_still_landing_is_read_as_it_was_handed_over(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """`record` answers a record written behind before its file exists (the next step reads it while it
    lands), and the file once it has landed; a path the job never wrote is read from disk (None: none)."""
    probe, redis = await leased_probe(settings)
    path = tmp_path / "apply.json"
    try:
        probe.write_behind(path, SandboxTrips(trips=1), then=lambda: None)
        assert not path.exists()
        landing = probe.record(path, SandboxTrips)
        assert landing is not None and landing.trips == 1
        assert probe.record(tmp_path / "other.json", SandboxTrips) is None
        await probe.landed()
        path.write_bytes(SandboxTrips(trips=5).model_dump_json().encode())  # read from the file now
        landed = probe.record(path, SandboxTrips)
        assert landed is not None and landed.trips == 5
    finally:
        await redis.aclose()


async def test_a_hurried_record_lands_while_another_job_starts_an_agent(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """A record written behind gives way to the worker's agent starts (here for a minute at most);
    `hurry_landing` lets it land at once, the caller not waiting for it: an apply's grade lands while its
    lock is taken."""
    probe, redis = await leased_probe(settings)
    slots = probe.runtime.slots
    slots.bookkeeping_wait_max_s = 60.0
    slots.hold("case:t1:c2:1")  # another job of the worker, about to start its first agent
    landed = asyncio.Event()
    path = tmp_path / "feedback.json"
    try:
        probe.write_behind(path, SandboxTrips(trips=1), then=landed.set)
        probe.hurry_landing()
        await asyncio.wait_for(landed.wait(), timeout=10)
        assert SandboxTrips.model_validate_json(path.read_bytes()).trips == 1
    finally:
        slots.release("case:t1:c2:1")
        await redis.aclose()
