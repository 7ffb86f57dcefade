"""Everything tunefleet takes from arq beyond its public API, in one place (docs/architecture.md, "arq's
keys, and how tunefleet bends arq"); `tests/test_arq_contact.py` fails when an arq upgrade changes any
of it.

tunefleet runs its own small scheduler (workers/fleet_worker.py: claim, run, finish) instead of
arq's `Worker`, and shares with arq only the *job format*, so that arq's public client reads and
writes tunefleet's jobs:

- arq's public API, used as documented: `ArqRedis` / `create_pool` / `RedisSettings`
  (service.core.io.connection), `ArqRedis.enqueue_job` (the client's `submit`, the daemon),
  `arq.jobs.Job` (status, info, result: what a program holding a job id may read), and `arq.Retry`
  (a job function's way to ask to be run again later; the scheduler reads its `defer_score`).
- arq's internals, below: the key names (`arq.constants`), the job and result records
  (`serialize_job`, `deserialize_job_raw`, `serialize_result` in `arq.jobs`), what `enqueue_job`
  checks and writes (re-done for a batch in one script, `ENQUEUE`), the retry counter's life
  (`RETRY_TTL_S`), and the meaning of the in-progress key (a job with one is not started again).

What tunefleet does *not* take from arq: its `Worker` (polling, claiming, timeouts, `max_tries`,
signals), its health-check key (`arq --check`; workers serve /healthz instead) and its abort set
(`Job.abort()` has no effect on tunefleet's jobs: `tunefleet cancel` cancels). Scores in the queue
are arq's (ms at which a job is due) for fresh jobs; a job that has run sits in a band of its own,
below zero (`RESUME_SHIFT_MS`), so that arq's `Job.status()` calls it `queued` while it waits to be
resumed, and `deferred` never.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from arq.jobs import SerializationError, deserialize_job_raw, serialize_job, serialize_result

JOB_PREFIX: str = job_key_prefix
"""STRING: a job's record (function, arguments, try, enqueue time), serialized."""
IN_PROGRESS_PREFIX: str = in_progress_key_prefix
"""STRING `1`: the job is running; no worker starts a job that has one."""
RESULT_PREFIX: str = result_key_prefix
"""STRING: a finished job's result record; `enqueue_job` refuses the id while it exists."""
RETRY_PREFIX: str = retry_key_prefix
"""STRING counter: the job's starts (its `job_try`)."""
RETRY_TTL_S = 88_400
"""How long arq keeps a job's start counter after each start."""

RESUME_SHIFT_MS = 10**13
"""A job that ran (its lease renewed, lost or handed back) waits in the queue at `due_ms - RESUME_SHIFT_MS`:
below zero, so it is claimed before every fresh job (score = enqueue time, in ms since 1970) once due."""

ENQUEUE = """
-- arq's enqueue_job for one job, in one step: refused while the job or its result exists.
-- KEYS: job result queue ; ARGV: record expires_ms score job_id
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 1
"""

Serializer = Callable[[dict[str, Any]], bytes]
Deserializer = Callable[[bytes], dict[str, Any]]


class JobFormatError(Exception):
    """A job record that arq's format cannot read (arq's SerializationError, translated here)."""


@dataclass(frozen=True)
class JobRecord:
    """A job as arq's `enqueue_job` recorded it."""

    function: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    job_try: int | None
    enqueue_ms: int


def job_record(function: str, payload: dict[str, Any], enqueue_ms: int, serializer: Serializer) -> bytes:
    """The record `enqueue_job(function, payload)` would write at `enqueue_ms`."""
    return serialize_job(function, (payload,), {}, None, enqueue_ms, serializer=serializer)


def read_job(raw: bytes, deserializer: Deserializer) -> JobRecord:
    """A job's record, or JobFormatError."""
    try:
        function, args, kwargs, job_try, enqueue_ms = deserialize_job_raw(raw, deserializer=deserializer)
    except SerializationError as exc:
        raise JobFormatError(f"the job record cannot be read: {exc.__cause__ or exc}") from exc
    return JobRecord(function, tuple(args), dict(kwargs), job_try, int(enqueue_ms))


@dataclass(frozen=True)
class TryRecord:
    """How one try of a job ended, in what arq's result record holds."""

    success: bool
    result: Any
    start_ms: int
    finished_ms: int


def result_record(
    job_id: str, job: JobRecord, job_try: int, try_record: TryRecord, queue: str, serializer: Serializer
) -> bytes | None:
    """The record arq's `Job.result()` and `Job.info()` read for a finished job (None if even a
    stand-in result cannot be serialized)."""
    return serialize_result(
        job.function,
        job.args,
        job.kwargs,
        job_try,
        job.enqueue_ms,
        try_record.success,
        try_record.result,
        try_record.start_ms,
        try_record.finished_ms,
        f"{job_id}:{job.function}",
        queue,
        job_id,
        serializer=serializer,
    )
