"""arq's Worker, made fit for hours-long cases on a fleet.

- Claims set arq's in-progress key for one lease, not the job timeout; the case's heartbeat
  renews it (workers.lease), so a dead worker's case is claimable again within a lease.
- `finish_job` acts only while the lease is still this process's token, in one script: a worker
  that wakes after losing its lease cannot touch the new owner's keys.
- A poll reads and claims in one script (arq claims jobs one by one, four round trips each, which
  made a hundred free slots fill in a fifth of a second): its fair share of the due jobs when other
  workers have free slots, and no suspect beside another (workers.claim).
- A slot that frees wakes the poll at once instead of leaving it idle until the next poll.
- SIGTERM/SIGINT: stop claiming at once, cancel the running cases (their agents get the grace
  period), let each give its case back to the queue, exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from typing import Any

import structlog
from arq import Worker, func
from arq.utils import timestamp_ms
from arq.worker import Function
from redis.exceptions import RedisError

from service.core import keys
from service.core.models.jobs import CASE_FUNCTION, GOAL_FUNCTION, dump_job, load_job
from workers.claim import Claimer
from workers.goals.job import run_goal
from workers.jobs import run_case
from workers.runtime import WorkerRuntime

log = structlog.get_logger()

CASE_TIMEOUT_S = 30 * 24 * 3600
"""A case may run for days; leases, not arq's timeout, bound a dead worker's hold."""
MAX_TRIES = 1_000_000
"""Infrastructure interruptions never use up a case's tries; lease losses are counted instead."""
KEEP_RESULT_S = 24 * 3600

FINISH = """
-- KEYS: lease holder losses in_progress retry job abort queue result suspect my_cases my_suspects
-- ARGV: token finish result result_ms defer_ms job_id
redis.call('SREM', KEYS[11], ARGV[6])
redis.call('SREM', KEYS[12], ARGV[6])
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if cur then return 0 end
elseif cur ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
if ARGV[2] == '1' then
  if ARGV[3] ~= '' then
    if tonumber(ARGV[4]) > 0 then
      redis.call('SET', KEYS[9], ARGV[3], 'PX', ARGV[4])
    else
      redis.call('SET', KEYS[9], ARGV[3])
    end
  end
  redis.call('DEL', KEYS[3], KEYS[5], KEYS[6], KEYS[10])
  redis.call('ZREM', KEYS[7], ARGV[6])
  redis.call('ZREM', KEYS[8], ARGV[6])
elseif tonumber(ARGV[5]) > 0 then
  -- a retry: due `defer_ms` from now (arq would add the time since the claim's score to the score,
  -- which renewals have moved on since: that pushed a case away by its whole run)
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[8], 'XX', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[5]), ARGV[6])
end
return 1
"""


def job_functions() -> list[Function]:
    """The job kinds a worker runs: one `func(...)` each (each must be leased like `run_case`)."""
    return [
        func(run_case, name=CASE_FUNCTION, timeout=CASE_TIMEOUT_S, max_tries=MAX_TRIES),
        func(run_goal, name=GOAL_FUNCTION, timeout=CASE_TIMEOUT_S, max_tries=MAX_TRIES),
    ]


class FleetWorker(Worker):
    """An arq worker whose jobs are leased cases."""

    def __init__(self, runtime: WorkerRuntime, *, burst: bool = False) -> None:
        settings = runtime.settings
        super().__init__(
            functions=job_functions(),
            redis_pool=runtime.redis,
            ctx={"runtime": runtime},
            queue_name=settings.queue,
            max_jobs=settings.concurrency,
            poll_delay=0,  # the poll waits in _poll_iteration, where a freed slot can wake it
            keep_result=KEEP_RESULT_S,
            job_serializer=dump_job,
            job_deserializer=load_job,
            health_check_interval=60,
            queue_read_limit=settings.queue_read_limit,
            burst=burst,
        )
        self.runtime = runtime
        self._finish = runtime.redis.register_script(FINISH)
        stale_ms = int((3 * settings.poll_delay_s + settings.outage_backoff_max_s) * 1000)
        self._claimer = Claimer(runtime.redis, settings.queue, runtime.name, self.queue_read_limit, stale_ms)
        self.in_progress_timeout_s = settings.lease_s
        self._stopping = False
        self._slot_freed = asyncio.Event()
        self.polled_at_s = time.monotonic()
        """When the poll loop last turned (monotonic): the worker's liveness (workers.health)."""
        self._poll_failures = 0
        self.claim_scores: dict[str, int] = {}
        """job id -> its score when claimed, which arq's retry delay (`incr_score`) is counted from."""

    async def _claim_due(self) -> None:
        """Claim this worker's share of the due jobs, in one round trip, and start them."""
        free = self.max_jobs - self.job_counter
        claimed = await self._claimer.claim(
            timestamp_ms(), free, int(self.in_progress_timeout_s * 1000), list(self.runtime.suspects.values())
        )
        for job in claimed:
            await self.sem.acquire()  # never waits: no more were claimed than there are free slots
            self.job_counter += 1
            if job.level:
                self.runtime.suspects[job.job_id] = job.level
            self.claim_scores[job.job_id] = job.score_ms
            task = self.loop.create_task(self.run_job(job.job_id, job.score_ms))
            task.add_done_callback(functools.partial(self._job_done, job.job_id))
            self.tasks[job.job_id] = task

    def _job_done(self, job_id: str, _: asyncio.Task[Any]) -> None:
        self.runtime.suspects.pop(job_id, None)
        self.claim_scores.pop(job_id, None)
        self._release_sem_dec_counter_on_complete()

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self._slot_freed.set()

    async def finish_job(
        self,
        job_id: str,
        finish: bool,
        result_data: bytes | None,
        result_timeout_s: float | None,
        keep_result_forever: bool,
        incr_score: int | None,
        keep_in_progress: float | None,
    ) -> None:
        token = self.runtime.leases.pop(job_id, None)
        result_ms = 0 if keep_result_forever or not result_timeout_s else int(result_timeout_s * 1000)
        defer_ms = 0
        if incr_score:  # arq's retry delay plus the time since the claim's score: the delay alone
            claimed_ms = self.claim_scores.get(job_id)
            defer_ms = (
                incr_score if claimed_ms is None else max(1, incr_score - (timestamp_ms() - claimed_ms))
            )
        done = await self._finish(
            [
                keys.lease(job_id),
                keys.holder(job_id),
                keys.losses(job_id),
                keys.arq_in_progress(job_id),
                keys.arq_retry(job_id),
                keys.arq_job(job_id),
                keys.arq_abort(),
                self.queue_name,
                keys.arq_result(job_id),
                keys.suspect(job_id),
                keys.worker_cases(self.runtime.name),
                keys.worker_suspects(self.runtime.name),
            ],
            [
                "" if token is None else str(token),
                "1" if finish else "0",
                result_data or b"",
                result_ms,
                defer_ms,
                job_id,
            ],
        )
        if not done:
            log.info("finish_skipped_not_owner", job_id=job_id, token=token)

    async def _poll_iteration(self) -> None:
        """Claim (while this worker takes jobs and has a free slot), reap the jobs that ended, beat
        arq's health check; then wait `poll_delay_s`, which a freed slot ends early. A Redis outage is
        logged once (workers.outage) and the polls back off until it ends."""
        self._slot_freed.clear()
        self.polled_at_s = time.monotonic()
        try:
            if self.allow_pick_jobs and self.job_counter < self.max_jobs:
                await self._claim_due()
            self._reap()
            await self.heart_beat()
        except RedisError as exc:
            self.runtime.outage.failed("poll", exc)
            self._poll_failures += 1
        else:
            self.runtime.outage.answered()
            self._poll_failures = 0
        wait_s = self.runtime.outage.wait_s(self.runtime.settings.poll_delay_s, self._poll_failures)
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a stop's cancel that lands in the
        # same turn as a freed slot, and the worker would poll on for ever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._slot_freed.wait()

    def _reap(self) -> None:
        for job_id, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[job_id]
                task.result()  # run_job handles its job's errors: anything else is a defect, raised

    def handle_sig(self, signum: Any) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.allow_pick_jobs = False
        log.info("worker_stopping", signal=signal.Signals(signum).name, running=len(self.job_tasks))
        for task in list(self.job_tasks.values()):
            task.cancel()
        self.loop.create_task(self._stop_when_released())

    async def _stop_when_released(self) -> None:
        with contextlib.suppress(RedisError):
            await self._claimer.leave()
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.runtime.settings.stop_grace_s + 5)
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        if self.main_task is not None:
            self.main_task.cancel()
