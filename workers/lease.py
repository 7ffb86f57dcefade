"""Leases on running cases: a fencing token per claim, renewed by a heartbeat, checked before every
write. The heartbeat also keeps arq's in-progress key alive and keeps the job's score in the queue
one lease ahead, in the resume band (`arq_contact.RESUME_SHIFT_MS`): idle workers never see running
jobs at the head of the queue, and a job whose heartbeats stopped, or that was handed back, is due
again before every fresh job (workers.claim).

Lost leases and poison (docs/architecture.md, "Poison"): a lease that expired under its worker
counts against the case only when nothing else could have taken that worker down: the case ran
there alone, or as the worker's only suspect. A case that lost its lease beside other cases becomes
a suspect instead: a *group* suspect (it may run beside other group suspects, as no one knows yet
which of them, if any, kills) if it was not a suspect when it died, else an *isolated* one (it runs
on a worker with no other suspect). The claim keeps to these rules; a case that records a step is
cleared (its suspicion and its counted losses are dropped). So a poison case is counted on every
death once it is isolated, and the innocent cases that died beside it are cleared by their next step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from service.core import keys
from service.core.io.arq_contact import RESUME_SHIFT_MS
from service.core.io.batch import RedisBatch
from service.core.io.lua import NEXT_TOKEN, NOW
from workers.errors import LeaseLost
from workers.lock import DROP_LAPSED
from workers.outage import RedisOutage, every

log = structlog.get_logger()

RESUME_AT = f"""
local function resume_at(ms)  -- the queue score of a job due `ms` from now (Redis time), in the resume band
  {NOW}
  return now + tonumber(ms) - {RESUME_SHIFT_MS}
end
"""

LOSS_VERDICT = """
-- a lease of `job` left behind by `holder` (`<token>@<worker>`): whether the loss counts against the
-- case (1/0), and the suspicion it leaves ('' none, 'group', 'isolate'). The worker's case and
-- suspect sets are as they were when it died.
local function loss_verdict(holder, job, cases_prefix, suspects_prefix)
  local at = string.find(holder, '@', 1, true)
  if not at then return 1, '' end
  local worker = string.sub(holder, at + 1)
  local suspects = suspects_prefix .. worker
  if redis.call('SISMEMBER', suspects, job) == 1 then
    if redis.call('SCARD', suspects) == 1 then return 1, 'isolate' end
    return 0, 'isolate'
  end
  if redis.call('SCARD', cases_prefix .. worker) > 1 then return 0, 'group' end
  return 1, ''
end
"""
"""A Lua function shared by ACQUIRE and the claim (which must foresee ACQUIRE's verdict)."""

ACQUIRE = f"""
-- KEYS: lease holder losses fence in_progress queue cancelled suspect my_cases my_suspects
--       [pending version: the run view of the job's tuning, read with the grant]
-- ARGV: lease_ms job_id worker cases_prefix suspects_prefix
{LOSS_VERDICT}{RESUME_AT}{NEXT_TOKEN}{DROP_LAPSED}
if redis.call('EXISTS', KEYS[1]) == 1 then return {{0, 0, 0, ''}} end
local lost = tonumber(redis.call('GET', KEYS[3]) or '0')
local level = redis.call('GET', KEYS[8]) or ''
local before = redis.call('GET', KEYS[2])
if before then
  local counts, verdict = loss_verdict(before, ARGV[2], ARGV[4], ARGV[5])
  if counts == 1 then lost = redis.call('INCR', KEYS[3]) end
  level = verdict
end
local token = next_token(KEYS[4])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
redis.call('SET', KEYS[2], token .. '@' .. ARGV[3])
redis.call('SET', KEYS[5], '1', 'PX', ARGV[1])
redis.call('SADD', KEYS[9], ARGV[2])
redis.call('PEXPIRE', KEYS[9], 86400000)
if level ~= '' then
  redis.call('SET', KEYS[8], level)
  redis.call('SADD', KEYS[10], ARGV[2])
  redis.call('PEXPIRE', KEYS[10], 86400000)
else
  redis.call('DEL', KEYS[8])
end
redis.call('ZADD', KEYS[6], 'XX', resume_at(ARGV[1]), ARGV[2])
local granted = {{token, lost, redis.call('SISMEMBER', KEYS[7], ARGV[2]), level}}
if #KEYS == 12 then  -- what workers.lock's PENDING and the version pointer would answer now ('': unset)
  drop_lapsed(KEYS[11])
  granted[5] = redis.call('ZRANGE', KEYS[11], 0, -1)
  granted[6] = redis.call('GET', KEYS[12]) or ''
end
return granted
"""

RENEW = f"""
-- KEYS: lease in_progress queue ; ARGV: token lease_ms job_id
{RESUME_AT}if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], 'XX', resume_at(ARGV[2]), ARGV[3])
return 1
"""

CHECK = """
-- KEYS: lease ; ARGV: token
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""

CLEAR = """
-- KEYS: lease suspect losses my_suspects ; ARGV: token job_id
-- (a CHECK that also clears the case of its suspicion and lost leases)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('SREM', KEYS[4], ARGV[2])
return 1
"""

COUNT_LOSS = """
-- KEYS: lease losses ; ARGV: token
-- (a loss counted by the holder itself: its claim crashed; -1 once the lease is another's)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
return redis.call('INCR', KEYS[2])
"""

REQUEUE = f"""
-- KEYS: lease holder in_progress queue my_cases my_suspects ; ARGV: token job_id defer_ms
{RESUME_AT}redis.call('SREM', KEYS[5], ARGV[2])
redis.call('SREM', KEYS[6], ARGV[2])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZADD', KEYS[4], 'XX', resume_at(ARGV[3]), ARGV[2])
return 1
"""


@dataclass(frozen=True)
class RunView:
    """A tuning's applies pending (waiting for or holding its lock) and its version pointer, read in one
    script: what a run start asks before it starts (workers.steps.run)."""

    pending: list[bytes]
    version: bytes | None
    """None while the pointer is unset."""
    read_at_s: float
    """When the answer came (monotonic)."""


@dataclass(frozen=True)
class Grant:
    """What ACQUIRE answered besides the lease."""

    lost: int
    """Leases the case lost that count against it (see `suspect`); at `max_lease_losses` it is poison."""
    cancelled: bool
    level: str
    """'' (not a suspect), 'group' or 'isolate': the case lost a lease beside other cases and may be
    the one that took its worker down, or an innocent neighbour (see the module's docstring)."""

    view: RunView | None = None
    """The run view of the tuning named to `JobLease.acquire` (`view_of`), read with the grant."""

    @property
    def suspect(self) -> bool:
        return self.level != ""

    def started(self, token: int, job_try: int) -> dict[str, Any]:
        """The `data` of a leased job's start event (`case_started`, `eval_item_started`): the lease, what
        it lost before, whether it is a suspect, and arq's try number."""
        return {"lease": token, "lost_leases": self.lost, "suspect": self.level or None, "try": job_try}


class JobLease:
    """The lease one worker holds on one running case."""

    def __init__(
        self,
        batch: RedisBatch,
        queue: str,
        job_id: str,
        lease_s: float,
        token: int,
        *,
        worker: str = "",
        on_probation: bool = False,
        on_cleared: Callable[[str], object] | None = None,
        outage: RedisOutage | None = None,
    ) -> None:
        self._batch = batch
        self._renew = batch.redis.register_script(RENEW)
        self._check = batch.redis.register_script(CHECK)
        self._clear = batch.redis.register_script(CLEAR)
        self._requeue = batch.redis.register_script(REQUEUE)
        self._count_loss = batch.redis.register_script(COUNT_LOSS)
        self._queue = queue
        self._worker = worker
        self.job_id = job_id
        self.lease_ms = int(lease_s * 1000)
        self.token = token
        self.lost = False
        self.on_probation = on_probation
        """Lost leases or suspicion to clear: the first check that passes (before the first record
        written, so once a step has run) clears them."""
        self._on_cleared = on_cleared
        self._outage = outage or RedisOutage(backoff_max_s=lease_s)

    @classmethod
    async def acquire(
        cls,
        batch: RedisBatch,
        queue: str,
        job_id: str,
        lease_s: float,
        tuning: str,
        worker: str = "",
        outage: RedisOutage | None = None,
        on_cleared: Callable[[str], object] | None = None,
        view_of: str | None = None,
    ) -> tuple[JobLease | None, Grant]:
        """The lease and what came with it (with `view_of`, that tuning's run view); (None, ...) if another
        worker holds it."""
        keys_ = [
            keys.lease(job_id),
            keys.holder(job_id),
            keys.losses(job_id),
            keys.fence(),
            keys.arq_in_progress(job_id),
            queue,
            keys.cancelled(tuning),
            keys.suspect(job_id),
            keys.worker_cases(worker),
            keys.worker_suspects(worker),
        ]
        if view_of is not None:
            keys_ += [keys.lock_pending(view_of), keys.version(view_of)]
        acquire = batch.redis.register_script(ACQUIRE)
        args = [int(lease_s * 1000), job_id, worker, keys.worker_cases(""), keys.worker_suspects("")]
        token, lost, cancelled, level, *seen = await batch.script(acquire, keys_, args)
        level = level.decode() if isinstance(level, bytes) else str(level)
        view = None
        if seen:
            pending, version = seen
            view = RunView(list(pending), version or None, time.monotonic())
        grant = Grant(lost=int(lost), cancelled=bool(cancelled), level=level, view=view)
        if int(token) == 0:
            return None, grant
        lease = cls(
            batch,
            queue,
            job_id,
            lease_s,
            int(token),
            worker=worker,
            on_probation=grant.suspect or grant.lost > 0,
            on_cleared=on_cleared,
            outage=outage,
        )
        return lease, grant

    async def renew(self) -> None:
        ok = await self._batch.script(
            self._renew,
            [keys.lease(self.job_id), keys.arq_in_progress(self.job_id), self._queue],
            [self.token, self.lease_ms, self.job_id],
        )
        if not ok:
            self.lost = True
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")

    async def check(self, *, clears: bool = True) -> None:
        """Raise LeaseLost unless the lease is still this token's (call before every write). The first
        check of a case on probation also clears it: it has run a step without taking its worker down
        (`clears=False`: a write before any step ran, which clears nothing)."""
        if self.lost:
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")
        if self.on_probation and clears:
            clear_keys = [
                keys.lease(self.job_id),
                keys.suspect(self.job_id),
                keys.losses(self.job_id),
                keys.worker_suspects(self._worker),
            ]
            ok = await self._batch.script(self._clear, clear_keys, [self.token, self.job_id])
        else:
            ok = await self._batch.script(self._check, [keys.lease(self.job_id)], [self.token])
        if not ok:
            self.lost = True
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")
        if self.on_probation and clears:
            self.on_probation = False
            if self._on_cleared is not None:
                self._on_cleared(self.job_id)
            log.info("case_cleared", job_id=self.job_id)

    async def count_loss(self) -> int | None:
        """Count a loss against the job while this lease holds it (its claim crashed: workers.envelope);
        the losses counted now, None when the lease is another's."""
        counted = await self._batch.script(
            self._count_loss, [keys.lease(self.job_id), keys.losses(self.job_id)], [self.token]
        )
        return None if int(counted) < 0 else int(counted)

    async def requeue(self, defer_s: float = 0.0) -> bool:
        """Give the case back to the queue (a clean stop): any worker may take it in `defer_s`."""
        ok = await self._requeue(
            [
                keys.lease(self.job_id),
                keys.holder(self.job_id),
                keys.arq_in_progress(self.job_id),
                self._queue,
                keys.worker_cases(self._worker),
                keys.worker_suspects(self._worker),
            ],
            [self.token, self.job_id, int(defer_s * 1000)],
        )
        return bool(ok)

    async def heartbeat(self) -> None:
        """Renew every third of the lease until cancelled; raises LeaseLost when renewal is refused."""
        interval_s = self.lease_ms / 3000
        await every(interval_s, self.renew, self._outage, "lease_renew", first_s=interval_s, backoff=False)
