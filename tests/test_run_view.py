"""The run view read with the lease (workers.lease.RunView): a case's first run start, straight after its
load, takes the pending applies and the version from its lease's round trip instead of asking again; the
view stands only until the case starts a step or waits for the fleet, and only while it is fresh."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from service.core import keys
from service.core.io.connection import connect
from service.core.models.jobs import CaseJob
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from workers.kinds.cases.kind import CaseKind
from workers.kinds.cases.run import START_VIEW_FRESH_S
from workers.lease import JobLease
from workers.runtime import WorkerRuntime


async def test_the_lease_reads_the_tuning_run_view_with_the_grant(fleet: Fleet) -> None:
    """With `view_of`, the lease's script answers the applies still pending (a lapsed mark is dropped, as
    the run start's own read drops it) and the version pointer; without it, or when another worker holds
    the job, no view."""
    redis = await connect(fleet.settings)
    try:
        runtime = WorkerRuntime(fleet.settings, redis, name="w1")
        now_ms = int(time.time() * 1000)
        await redis.zadd(keys.lock_pending("t1"), {"case:t1:a:1": now_ms + 60_000, "case:t1:b:1": now_ms - 1})
        await redis.set(keys.version("t1"), "v1")
        for job in ("case:t1:x:1", "case:t1:y:1"):
            await redis.zadd(fleet.settings.queue, {job: 0})
        _, grant = await runtime.acquire("case:t1:x:1", "t1", "t1")
        assert grant.view is not None
        assert (grant.view.pending, grant.view.version) == ([b"case:t1:a:1"], b"v1")
        assert await redis.zrange(keys.lock_pending("t1"), 0, -1) == [b"case:t1:a:1"]
        _, plain = await runtime.acquire("case:t1:y:1", "t1")
        assert plain.view is None
        held, refused = await JobLease.acquire(
            runtime.batch, fleet.settings.queue, "case:t1:x:1", 3.0, "t1", worker="w2", view_of="t1"
        )
        assert held is None and refused.view is None
    finally:
        await redis.aclose()


async def test_a_case_takes_the_view_once_and_only_before_it_waits_or_ages(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Loaded with a fresh view, a case's first run start takes it once; a case that waited for the fleet
    (`at(..., waiting=...)`), or whose view is older than START_VIEW_FRESH_S, takes none and asks again.
    A worker whose run starts do not wait for applies (`wait_for_apply` off) has no view read at all."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")], adapter=demo_adapter()))
    redis = await connect(fleet.settings)
    try:
        runtime = WorkerRuntime(fleet.settings, redis, name="w1")
        job = CaseJob(tuning="t1", case="c1", rev=1)
        assert CaseKind().run_view_of(runtime, job) == "t1"
        no_wait = fleet.settings.model_copy(update={"wait_for_apply": False})
        assert CaseKind().run_view_of(WorkerRuntime(no_wait, redis, name="w2"), job) is None
        lease, grant = await runtime.acquire(job.job_id, job.scope, "t1")
        assert grant.view is not None
        assert grant.view.version == await redis.get(keys.version("t1"))  # the tuning's start set it

        fresh = await CaseKind().load(runtime, job, lease, grant, 1)
        assert fresh.take_start_view() == grant.view
        assert fresh.take_start_view() is None

        waited = await CaseKind().load(runtime, job, lease, grant, 1)
        waited.at("run", "nomem", 1, waiting="resume")
        assert waited.take_start_view() is None

        old_view = dataclasses.replace(grant.view, read_at_s=time.monotonic() - 2 * START_VIEW_FRESH_S)
        aged = await CaseKind().load(runtime, job, lease, dataclasses.replace(grant, view=old_view), 1)
        assert aged.take_start_view() is None
    finally:
        await redis.aclose()
