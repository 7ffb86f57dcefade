"""Finishing one try of a job, fenced by its lease: a worker that lost the lease changes nothing.

One script, `FINISH`, acts only while `tf:lease:<id>` still holds this process's token (or, for a job
this process never leased, while no one holds a lease). It then deletes the lease, the holder and
arq's in-progress key, and either ends the job (stores arq's result record, deletes the loss and
start counters, the provider hand-backs' count and the job record, removes the queue entry) or puts
it back in the queue's resume band, due `defer_ms` from now by Redis's clock (workers.claim takes it
before fresh jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from service.core import keys
from service.core.io.batch import RedisBatch
from workers.lease import RESUME_AT

log = structlog.get_logger()

FINISH = f"""
-- KEYS: lease holder losses in_progress retry job queue result suspect my_cases my_suspects handbacks
-- ARGV: token finish result result_ms defer_ms job_id
{RESUME_AT}redis.call('SREM', KEYS[10], ARGV[6])
redis.call('SREM', KEYS[11], ARGV[6])
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if cur then return 0 end
elseif cur ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
if ARGV[2] == '1' then
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[8], ARGV[3], 'PX', ARGV[4])
  end
  redis.call('DEL', KEYS[3], KEYS[5], KEYS[6], KEYS[9], KEYS[12])
  redis.call('ZREM', KEYS[7], ARGV[6])
else
  redis.call('ZADD', KEYS[7], 'XX', resume_at(ARGV[5]), ARGV[6])
end
return 1
"""


@dataclass(frozen=True)
class Outcome:
    """How a try ended for the queue: `ended` (with arq's result record), or back in the queue in
    `defer_ms`."""

    ended: bool
    result: bytes | None = None
    defer_ms: int = 0


class Finisher:
    """The FINISH script of one worker process (sent with the other calls of its loop turn: a burst of
    cases ending is one round trip)."""

    def __init__(self, batch: RedisBatch, queue: str, worker: str, keep_result_ms: int) -> None:
        self._batch = batch
        self._script = batch.redis.register_script(FINISH)
        self._queue = queue
        self._worker = worker
        self._keep_result_ms = keep_result_ms

    async def finish(self, job_id: str, token: int | None, outcome: Outcome) -> bool:
        """Apply the outcome unless the lease has moved on (False: another worker owns the job now)."""
        done = await self._batch.script(
            self._script,
            [
                keys.lease(job_id),
                keys.holder(job_id),
                keys.losses(job_id),
                keys.arq_in_progress(job_id),
                keys.arq_retry(job_id),
                keys.arq_job(job_id),
                self._queue,
                keys.arq_result(job_id),
                keys.suspect(job_id),
                keys.worker_cases(self._worker),
                keys.worker_suspects(self._worker),
                keys.handbacks(job_id),
            ],
            [
                "" if token is None else str(token),
                "1" if outcome.ended else "0",
                outcome.result or b"",
                self._keep_result_ms,
                outcome.defer_ms,
                job_id,
            ],
        )
        if not done:
            log.info("finish_skipped_not_owner", job_id=job_id, token=token)
        return bool(done)
