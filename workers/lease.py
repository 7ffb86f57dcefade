"""Leases on running cases: a fencing token per claim, renewed by a heartbeat, checked before every
write. The heartbeat also keeps arq's in-progress key alive and pushes the job's score in the
queue into the future, so that idle workers never see running jobs at the head of the queue.
"""

from __future__ import annotations

import asyncio

import structlog
from redis.exceptions import RedisError

from service import keys
from service.batch import RedisBatch
from workers.errors import LeaseLost

log = structlog.get_logger()

_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)"

ACQUIRE = f"""
-- KEYS: lease holder losses fence in_progress queue cancelled ; ARGV: lease_ms job_id
if redis.call('EXISTS', KEYS[1]) == 1 then return {{0, 0, 0}} end
local lost
if redis.call('EXISTS', KEYS[2]) == 1 then
  lost = redis.call('INCR', KEYS[3])
else
  lost = tonumber(redis.call('GET', KEYS[3]) or '0')
end
local token = redis.call('INCR', KEYS[4])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[5], '1', 'PX', ARGV[1])
{_NOW_MS}
redis.call('ZADD', KEYS[6], 'XX', now + tonumber(ARGV[1]), ARGV[2])
return {{token, lost, redis.call('SISMEMBER', KEYS[7], ARGV[2])}}
"""

RENEW = f"""
-- KEYS: lease in_progress queue ; ARGV: token lease_ms job_id
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
{_NOW_MS}
redis.call('ZADD', KEYS[3], 'XX', now + tonumber(ARGV[2]), ARGV[3])
return 1
"""

CHECK = """
-- KEYS: lease ; ARGV: token
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""

REQUEUE = f"""
-- KEYS: lease holder in_progress queue ; ARGV: token job_id defer_ms
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
{_NOW_MS}
redis.call('ZADD', KEYS[4], 'XX', now + tonumber(ARGV[3]), ARGV[2])
return 1
"""


class CaseLease:
    """The lease one worker holds on one running case."""

    def __init__(self, batch: RedisBatch, queue: str, job_id: str, lease_s: float, token: int) -> None:
        self._batch = batch
        self._renew = batch.redis.register_script(RENEW)
        self._check = batch.redis.register_script(CHECK)
        self._requeue = batch.redis.register_script(REQUEUE)
        self._queue = queue
        self.job_id = job_id
        self.lease_ms = int(lease_s * 1000)
        self.token = token
        self.lost = False

    @classmethod
    async def acquire(
        cls, batch: RedisBatch, queue: str, job_id: str, lease_s: float, tuning: str
    ) -> tuple[CaseLease | None, int, bool]:
        """The lease, how many leases the case lost before, and whether it was cancelled;
        (None, 0, False) if another worker holds it."""
        keys_ = [
            keys.lease(job_id),
            keys.holder(job_id),
            keys.losses(job_id),
            keys.fence(),
            keys.arq_in_progress(job_id),
            queue,
            keys.cancelled(tuning),
        ]
        acquire = batch.redis.register_script(ACQUIRE)
        token, lost, cancelled = await batch.script(acquire, keys_, [int(lease_s * 1000), job_id])
        if int(token) == 0:
            return None, 0, False
        return cls(batch, queue, job_id, lease_s, int(token)), int(lost), bool(cancelled)

    async def renew(self) -> None:
        ok = await self._batch.script(
            self._renew,
            [keys.lease(self.job_id), keys.arq_in_progress(self.job_id), self._queue],
            [self.token, self.lease_ms, self.job_id],
        )
        if not ok:
            self.lost = True
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")

    async def check(self) -> None:
        """Raise LeaseLost unless the lease is still this token's (call before every write)."""
        if self.lost:
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")
        ok = await self._batch.script(self._check, [keys.lease(self.job_id)], [self.token])
        if not ok:
            self.lost = True
            raise LeaseLost(f"case {self.job_id}: lease {self.token} lost")

    async def requeue(self, defer_s: float = 0.0) -> bool:
        """Give the case back to the queue (a clean stop): any worker may take it in `defer_s`."""
        ok = await self._requeue(
            [
                keys.lease(self.job_id),
                keys.holder(self.job_id),
                keys.arq_in_progress(self.job_id),
                self._queue,
            ],
            [self.token, self.job_id, int(defer_s * 1000)],
        )
        return bool(ok)

    async def heartbeat(self) -> None:
        """Renew every third of the lease until cancelled; raises LeaseLost when renewal is refused."""
        interval_s = self.lease_ms / 3000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.renew()
            except RedisError as exc:
                log.warning("lease_renew_failed", job_id=self.job_id, error=str(exc))
