"""Claiming: one script per poll reads the due jobs, takes this worker's share of them, and tells the
fleet how many slots this worker has left.

- **Resumed jobs first.** A job that has run before (its lease was renewed, lost, or handed back)
  waits in the queue's resume band (`arq_contact.RESUME_SHIFT_MS`: its due time shifted below
  zero); every due job of that band is taken before the fresh jobs, oldest due first. So a dead
  worker's cases, and those a stopping worker handed back, are resumed at the first free slot
  after they are due, however many fresh cases wait.
- **Fair.** Each poll records this worker's free slots (`tf:free-slots`, stamped with Redis time). A
  worker takes every open job it has room for only when no other worker has free slots; otherwise at
  most its share of the open jobs, in proportion to its free slots among all the fresh free slots
  (rounded up, at least one). Others' entries older than `stale_ms` (a worker stopped, paused or
  gone) do not count, and are dropped after a minute. One worker alone claims as before.
- **One try of a job per worker at a time.** A worker never claims a job it is still running: a try
  whose lease lapsed under it (the worker was paused, say) may take seconds to end (its agents get
  their grace period), and a second try beside it would share its bookkeeping. Other workers may
  take the job meanwhile.
- **Suspects apart** (`workers.lease`). An isolated suspect is taken only by a worker that runs no
  other suspect; a group suspect only by one that runs no isolated suspect. Group suspects (most of
  them innocent, dead beside a poison case) go first: a claim takes an isolated suspect only when it
  takes no group suspect, since a worker that holds one can take no group suspect until it clears.
- **One round trip.** The read (due by Redis's clock), the checks (no in-progress key, no lease),
  the claims (arq's in-progress key for one lease, the job moved to the resume band one lease ahead,
  its start counted), the job records and the free-slots record are one script. A queue entry whose
  job record is gone (cancelled, or re-enqueued under way) is dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from redis.asyncio import Redis

from service.core import keys
from service.core.io.arq_contact import RESUME_SHIFT_MS, RETRY_TTL_S
from service.core.io.lua import NOW
from workers.lease import LOSS_VERDICT

CLAIM = f"""
-- KEYS: queue free_slots
-- ARGV: read_limit worker free stale_ms suspects isolated in_progress_ms shift_ms retry_ttl_s
--       in_progress_prefix lease_prefix holder_prefix suspect_prefix cases_prefix suspects_prefix
--       job_prefix retry_prefix running...
-- (suspects: how many this worker runs; isolated: 1 if one of them is isolated; running: the ids of
-- the jobs this worker runs, which it does not claim again)
-- returns {{job id, score, suspect level ('' / group / isolate), try, job record, ...}}
{LOSS_VERDICT}
{NOW}
local limit = tonumber(ARGV[1])
local free = tonumber(ARGV[3])
local suspects = tonumber(ARGV[5])
local isolated = ARGV[6] == '1'
local shift = tonumber(ARGV[8])
local mine = {{}}
for i = 18, #ARGV do mine[ARGV[i]] = true end
local others = 0
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if entries[i] ~= ARGV[2] then
    local sep = string.find(entries[i + 1], ':', 1, true)
    local slots = tonumber(string.sub(entries[i + 1], 1, sep - 1))
    local seen = tonumber(string.sub(entries[i + 1], sep + 1))
    if seen >= now - tonumber(ARGV[4]) then
      others = others + slots
    elseif seen < now - 60000 then
      redis.call('HDEL', KEYS[2], entries[i])
    end
  end
end
local open = {{}}
local lone = nil  -- the first isolated suspect seen: taken only if this claim takes no other suspect
local function consider(due)
  for i = 1, #due, 2 do
    if #open >= free + others then return end
    local id = due[i]
    local free_to_take = not mine[id] and redis.call('EXISTS', ARGV[10] .. id) == 0
    if free_to_take and redis.call('EXISTS', ARGV[11] .. id) == 0 then
      local level = redis.call('GET', ARGV[13] .. id) or ''
      local holder = redis.call('GET', ARGV[12] .. id)
      if holder then  -- a lease left behind: foresee ACQUIRE's verdict
        local _, verdict = loss_verdict(holder, id, ARGV[14], ARGV[15])
        level = verdict
      end
      if level == '' or (level == 'group' and not isolated) then
        open[#open + 1] = {{id, due[i + 1], level}}
        if level ~= '' then suspects = suspects + 1 end
      elseif level == 'isolate' and suspects == 0 and not lone then
        lone = {{id, due[i + 1], level}}
      end
    end
  end
end
local function take_lone()
  if lone and suspects == 0 and #open < free + others then
    open[#open + 1] = lone
    suspects, isolated = 1, true
  end
end
if free > 0 then
  consider(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - shift, 'LIMIT', 0, limit, 'WITHSCORES'))
  take_lone()
  consider(redis.call('ZRANGEBYSCORE', KEYS[1], 0, now, 'LIMIT', 0, limit, 'WITHSCORES'))
  take_lone()  -- one re-enqueued as a fresh job (the daemon's reconcile)
end
local take = math.min(free, #open)
if others > 0 and take > 0 then
  take = math.min(take, math.max(1, math.ceil(#open * free / (free + others))))
end
local claimed = {{}}
local taken = 0
for i = 1, take do
  local id = open[i][1]
  local record = redis.call('GET', ARGV[16] .. id)
  if record then
    redis.call('SET', ARGV[10] .. id, '1', 'PX', ARGV[7])
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[7]) - shift, id)
    local try = redis.call('INCR', ARGV[17] .. id)
    redis.call('EXPIRE', ARGV[17] .. id, ARGV[9])
    claimed[#claimed + 1] = id
    claimed[#claimed + 1] = open[i][2]
    claimed[#claimed + 1] = open[i][3]
    claimed[#claimed + 1] = try
    claimed[#claimed + 1] = record
    taken = taken + 1
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
redis.call('HSET', KEYS[2], ARGV[2], (free - taken) .. ':' .. now)
return claimed
"""


def claim_arguments(
    read_limit: int,
    worker: str,
    free: int,
    stale_ms: int,
    in_progress_ms: int,
    suspects: list[str],
    running: Collection[str] = (),
) -> list[str | int]:
    """CLAIM's ARGV for `free` slots of `worker`, given the suspicion levels of the suspects it runs and
    the ids of the jobs it runs."""
    return [
        read_limit,
        worker,
        free,
        stale_ms,
        len(suspects),
        "1" if "isolate" in suspects else "0",
        in_progress_ms,
        RESUME_SHIFT_MS,
        RETRY_TTL_S,
        keys.arq_in_progress(""),
        keys.lease(""),
        keys.holder(""),
        keys.suspect(""),
        keys.worker_cases(""),
        keys.worker_suspects(""),
        keys.arq_job(""),
        keys.arq_retry(""),
        *running,
    ]


@dataclass(frozen=True)
class Claimed:
    job_id: str
    score_ms: int
    level: str
    """The suspicion the case carries ('' none, 'group', 'isolate'; workers.lease)."""
    job_try: int
    """arq's count of the job's starts, this one included."""
    record: bytes
    """The job's record, as arq's `enqueue_job` wrote it (service.core.io.arq_contact)."""


class Claimer:
    """The claiming script of one worker."""

    def __init__(self, redis: Redis, queue: str, worker: str, read_limit: int, stale_ms: int) -> None:
        self._script = redis.register_script(CLAIM)
        self._redis = redis
        self._queue = queue
        self._worker = worker
        self._read_limit = read_limit
        self._stale_ms = stale_ms

    async def claim(
        self, free: int, in_progress_ms: int, suspects: list[str], running: Collection[str]
    ) -> list[Claimed]:
        """Claim this worker's share of the due jobs (at most `free`; none with 0, which only records
        that this worker is full), given the suspicion levels of the suspects it runs and the ids of the
        jobs it runs (never claimed again while they run)."""
        argv = claim_arguments(
            self._read_limit, self._worker, free, self._stale_ms, in_progress_ms, suspects, running
        )
        reply = await self._script([self._queue, keys.free_slots()], argv)
        return [
            Claimed(job_id.decode(), int(float(score)), level.decode(), int(job_try), record)
            for job_id, score, level, job_try, record in zip(
                reply[::5], reply[1::5], reply[2::5], reply[3::5], reply[4::5], strict=True
            )
        ]

    async def leave(self) -> None:
        """Drop this worker's free-slots entry (it claims no more)."""
        await self._redis.hdel(keys.free_slots(), self._worker)  # type: ignore[misc]
