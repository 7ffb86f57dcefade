"""The contract with arq (service/core/io/arq_contact.py): every arq internal tunefleet relies on is as the
contact module uses it, and arq's public client reads and writes tunefleet's jobs. An arq upgrade that
changes a signature, a key name or the job format fails here."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest
from arq import Retry
from arq.connections import ArqRedis
from arq.jobs import Job, JobStatus, deserialize_job_raw, serialize_job, serialize_result

from service.core import keys
from service.core.io import arq_contact
from service.core.io.connection import connect
from service.core.models.jobs import CASE_FUNCTION, CaseJob, dump_job, load_job
from service.core.settings import FleetSettings
from service.kinds.cases.fleet import enqueue_cases
from workers.claim import Claimer
from workers.finish import Finisher, Outcome
from workers.lease import JobLease
from workers.runtime import WorkerRuntime

JOB = CaseJob(tuning="t1", case="c1", rev=1)


@pytest.fixture
async def pool(settings: FleetSettings) -> AsyncIterator[ArqRedis]:
    redis = await connect(settings)
    yield redis
    await redis.aclose()


def _parameters(function: object) -> list[str]:
    return [
        f"{p.name}{'=' if p.default is not p.empty else ''}{'*' if p.kind is p.KEYWORD_ONLY else ''}"
        for p in inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    ]


def test_the_record_functions_take_what_the_contact_module_passes() -> None:
    """serialize_job, deserialize_job_raw and serialize_result have the parameters, in the order, that
    service/core/io/arq_contact.py passes them (positionally)."""
    assert _parameters(serialize_job) == [
        "function_name",
        "args",
        "kwargs",
        "job_try",
        "enqueue_time_ms",
        "serializer=*",
    ]
    assert _parameters(deserialize_job_raw) == ["r", "deserializer=*"]
    assert _parameters(serialize_result) == [
        "function",
        "args",
        "kwargs",
        "job_try",
        "enqueue_time_ms",
        "success",
        "result",
        "start_ms",
        "finished_ms",
        "ref",
        "queue_name",
        "job_id",
        "serializer=*",
    ]
    assert Retry(defer=1.5).defer_score == 1500  # the scheduler reads a Retry's delay in ms


def test_arqs_key_names_are_those_the_acl_and_the_docs_name() -> None:
    """arq's key prefixes are the ones deploy/redis/users.acl grants (`~arq:*`) and docs/architecture.md
    lists, and the retry counter lives as long as arq's own worker keeps it."""
    assert keys.arq_job("j") == "arq:job:j"
    assert keys.arq_in_progress("j") == "arq:in-progress:j"
    assert keys.arq_result("j") == "arq:result:j"
    assert keys.arq_retry("j") == "arq:retry:j"
    worker_source = inspect.getsource(__import__("arq.worker", fromlist=["Worker"]).Worker.run_job)
    assert f"retry_key_prefix + job_id, {arq_contact.RETRY_TTL_S}" in worker_source


async def test_a_batch_enqueue_writes_what_enqueue_job_writes(
    pool: ArqRedis, settings: FleetSettings
) -> None:
    """A case enqueued by the client's batch (ENQUEUE) reads through arq's `Job.info()` exactly as one
    enqueued by arq's `enqueue_job`, each refuses the other's id, and both are due in the fresh band."""
    other = CaseJob(tuning="t1", case="c2", rev=1)
    assert await enqueue_cases(pool, settings.queue, [JOB], 1_700_000_000_000) == [True]
    assert await pool.enqueue_job(CASE_FUNCTION, other.model_dump(), _job_id=other.job_id) is not None
    ours = await Job(JOB.job_id, pool, settings.queue, load_job).info()
    theirs = await Job(other.job_id, pool, settings.queue, load_job).info()
    assert ours is not None and theirs is not None
    assert (ours.function, list(ours.args), ours.kwargs) == (CASE_FUNCTION, [JOB.model_dump()], {})
    assert ours.job_try is None
    assert (theirs.function, list(theirs.args), theirs.kwargs) == (CASE_FUNCTION, [other.model_dump()], {})
    assert ours.enqueue_time.timestamp() == 1_700_000_000 and ours.score == 1_700_000_000_000
    assert theirs.score is not None and theirs.score > 0
    assert await pool.enqueue_job(CASE_FUNCTION, JOB.model_dump(), _job_id=JOB.job_id) is None
    assert await enqueue_cases(pool, settings.queue, [other], 1_700_000_000_000) == [False]
    assert await Job(JOB.job_id, pool, settings.queue).status() == JobStatus.queued


async def test_a_job_enqueue_job_wrote_is_claimed_run_and_finished_as_arq_reads_it(
    pool: ArqRedis, settings: FleetSettings
) -> None:
    """A job from arq's `enqueue_job` is claimed with its record (arq's `Job.status()`: in progress),
    handed back into the resume band (`queued`, claimed again before a fresh job), and finished with a
    result that arq's `Job.result()` and `Job.info()` read."""
    fresh = CaseJob(tuning="t1", case="c9", rev=1)
    await pool.enqueue_job(CASE_FUNCTION, JOB.model_dump(), _job_id=JOB.job_id)
    runtime = WorkerRuntime(settings, pool, name="w:1")
    claimer = Claimer(pool, settings.queue, runtime.name, 100, 1_000)
    finisher = Finisher(runtime.batch, settings.queue, runtime.name, 60_000)
    job = Job(JOB.job_id, pool, settings.queue, load_job)

    (claimed,) = await claimer.claim(5, 10_000, [], ())
    record = arq_contact.read_job(claimed.record, load_job)
    assert (claimed.job_id, claimed.job_try, record.function, record.args) == (
        JOB.job_id,
        1,
        CASE_FUNCTION,
        (JOB.model_dump(),),
    )
    assert await job.status() == JobStatus.in_progress
    lease, _ = await JobLease.acquire(runtime.batch, settings.queue, JOB.job_id, 10.0, "t1", runtime.name)
    assert lease is not None and await lease.requeue()
    assert await job.status() == JobStatus.queued

    await enqueue_cases(pool, settings.queue, [fresh], 1)  # due since 1970
    (again,) = await claimer.claim(1, 10_000, [], ())
    assert (again.job_id, again.job_try) == (JOB.job_id, 2)
    ending = arq_contact.TryRecord(True, {"state": "completed"}, 1, 2)
    result = arq_contact.result_record(JOB.job_id, record, 2, ending, settings.queue, dump_job)
    assert await finisher.finish(JOB.job_id, None, Outcome(ended=True, result=result))
    assert await job.status() == JobStatus.complete
    assert await job.result(timeout=1) == {"state": "completed"}
    info = await job.info()
    assert info is not None and (info.job_try, info.success) == (2, True)  # type: ignore[attr-defined]
    assert not await pool.exists(keys.arq_job(JOB.job_id), keys.arq_retry(JOB.job_id))
    assert await pool.zscore(settings.queue, JOB.job_id) is None
