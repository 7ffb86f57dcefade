"""Claiming: one script per poll reads the due jobs, takes this worker's share of them, and tells the
fleet how many slots this worker has left.

- **Fair.** Each poll records this worker's free slots (`tf:free-slots`, stamped with Redis time). A
  worker takes every open job it has room for only when no other worker has free slots; otherwise at
  most its share of the open jobs, in proportion to its free slots among all the fresh free slots
  (rounded up, at least one). Others' entries older than `stale_ms` (a worker stopped, paused or
  gone) do not count, and are dropped after a minute. One worker alone claims as before.
- **Suspects apart.** A job that lost its lease beside other cases (`workers.lease`) is taken only by
  a worker that runs no suspect, and one per poll.
- **One round trip.** The read, the checks arq makes one job at a time (due, not in progress) plus
  "not leased", the claims (arq's in-progress key, for one lease) and the free-slots record are one
  script.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from service import keys
from workers.lease import LOST_AMONG_OTHERS

CLAIM = f"""
-- KEYS: queue free_slots
-- ARGV: now_ms in_progress_ms read_limit worker free stale_ms suspect_ok
--       in_progress_prefix lease_prefix holder_prefix suspect_prefix cases_prefix
-- returns {{job id, score, suspect (0/1), ...}}
{LOST_AMONG_OTHERS}
local t = redis.call('TIME')
local clock = t[1] * 1000 + math.floor(t[2] / 1000)
local free = tonumber(ARGV[5])
local suspect_ok = ARGV[7] == '1'
local others = 0
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if entries[i] ~= ARGV[4] then
    local sep = string.find(entries[i + 1], ':', 1, true)
    local slots = tonumber(string.sub(entries[i + 1], 1, sep - 1))
    local seen = tonumber(string.sub(entries[i + 1], sep + 1))
    if seen >= clock - tonumber(ARGV[6]) then
      others = others + slots
    elseif seen < clock - 60000 then
      redis.call('HDEL', KEYS[2], entries[i])
    end
  end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]), 'WITHSCORES')
local open = {{}}
for i = 1, #due, 2 do
  if #open >= free + others then break end
  local id = due[i]
  if redis.call('EXISTS', ARGV[8] .. id) == 0 and redis.call('EXISTS', ARGV[9] .. id) == 0 then
    local suspect = redis.call('EXISTS', ARGV[11] .. id) == 1
    if not suspect then
      local holder = redis.call('GET', ARGV[10] .. id)
      suspect = holder ~= false and lost_among_others(holder, ARGV[12])
    end
    if suspect_ok or not suspect then
      open[#open + 1] = {{id, due[i + 1], suspect and 1 or 0}}
      if suspect then suspect_ok = false end
    end
  end
end
local take = math.min(free, #open)
if others > 0 and take > 0 then
  take = math.min(take, math.max(1, math.ceil(#open * free / (free + others))))
end
local claimed = {{}}
for i = 1, take do
  local job = open[i]
  redis.call('SET', ARGV[8] .. job[1], '1', 'PX', ARGV[2])
  claimed[#claimed + 1] = job[1]
  claimed[#claimed + 1] = job[2]
  claimed[#claimed + 1] = job[3]
end
redis.call('HSET', KEYS[2], ARGV[4], (free - take) .. ':' .. clock)
return claimed
"""


@dataclass(frozen=True)
class Claimed:
    job_id: str
    score_ms: int
    suspect: bool


class Claimer:
    """The claiming script of one worker."""

    def __init__(self, redis: Redis, queue: str, worker: str, read_limit: int, stale_ms: int) -> None:
        self._script = redis.register_script(CLAIM)
        self._redis = redis
        self._queue = queue
        self._worker = worker
        self._read_limit = read_limit
        self._stale_ms = stale_ms

    async def claim(self, now_ms: int, free: int, in_progress_ms: int, suspect_ok: bool) -> list[Claimed]:
        """Claim this worker's share of the jobs due at `now_ms` (at most `free`)."""
        reply = await self._script(
            [self._queue, keys.free_slots()],
            [
                now_ms,
                in_progress_ms,
                self._read_limit,
                self._worker,
                free,
                self._stale_ms,
                "1" if suspect_ok else "0",
                keys.arq_in_progress(""),
                keys.lease(""),
                keys.holder(""),
                keys.suspect(""),
                keys.worker_cases(""),
            ],
        )
        return [
            Claimed(job_id.decode(), int(float(score)), bool(int(suspect)))
            for job_id, score, suspect in zip(reply[::3], reply[1::3], reply[2::3], strict=True)
        ]

    async def leave(self) -> None:
        """Drop this worker's free-slots entry (it claims no more)."""
        await self._redis.hdel(keys.free_slots(), self._worker)  # type: ignore[misc]
