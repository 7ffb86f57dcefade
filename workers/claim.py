"""Claiming: one script per poll reads the due jobs, takes this worker's share of them, and tells the
fleet how many slots this worker has left.

- **Fair.** Each poll records this worker's free slots (`tf:free-slots`, stamped with Redis time). A
  worker takes every open job it has room for only when no other worker has free slots; otherwise at
  most its share of the open jobs, in proportion to its free slots among all the fresh free slots
  (rounded up, at least one). Others' entries older than `stale_ms` (a worker stopped, paused or
  gone) do not count, and are dropped after a minute. One worker alone claims as before.
- **Suspects apart** (`workers.lease`). An isolated suspect is taken only by a worker that runs no
  other suspect; a group suspect only by one that runs no isolated suspect.
- **One round trip.** The read, the checks arq makes one job at a time (due, not in progress) plus
  "not leased", the claims (arq's in-progress key, for one lease) and the free-slots record are one
  script.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from service.core import keys
from workers.lease import LOSS_VERDICT

CLAIM = f"""
-- KEYS: queue free_slots
-- ARGV: now_ms in_progress_ms read_limit worker free stale_ms suspects isolated
--       in_progress_prefix lease_prefix holder_prefix suspect_prefix cases_prefix suspects_prefix
-- (suspects: how many this worker runs; isolated: 1 if one of them is isolated)
-- returns {{job id, score, suspect level ('' / group / isolate), ...}}
{LOSS_VERDICT}
local t = redis.call('TIME')
local clock = t[1] * 1000 + math.floor(t[2] / 1000)
local free = tonumber(ARGV[5])
local suspects = tonumber(ARGV[7])
local isolated = ARGV[8] == '1'
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
  if redis.call('EXISTS', ARGV[9] .. id) == 0 and redis.call('EXISTS', ARGV[10] .. id) == 0 then
    local level = redis.call('GET', ARGV[12] .. id) or ''
    local holder = redis.call('GET', ARGV[11] .. id)
    if holder then  -- a lease left behind: foresee ACQUIRE's verdict
      local _, verdict = loss_verdict(holder, id, ARGV[13], ARGV[14])
      level = verdict
    end
    if level == '' or (level == 'group' and not isolated) or (level == 'isolate' and suspects == 0) then
      open[#open + 1] = {{id, due[i + 1], level}}
      if level ~= '' then suspects = suspects + 1 end
      if level == 'isolate' then isolated = true end
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
  redis.call('SET', ARGV[9] .. job[1], '1', 'PX', ARGV[2])
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
    level: str
    """The suspicion the case carries ('' none, 'group', 'isolate'; workers.lease)."""


class Claimer:
    """The claiming script of one worker."""

    def __init__(self, redis: Redis, queue: str, worker: str, read_limit: int, stale_ms: int) -> None:
        self._script = redis.register_script(CLAIM)
        self._redis = redis
        self._queue = queue
        self._worker = worker
        self._read_limit = read_limit
        self._stale_ms = stale_ms

    async def claim(self, now_ms: int, free: int, in_progress_ms: int, suspects: list[str]) -> list[Claimed]:
        """Claim this worker's share of the jobs due at `now_ms` (at most `free`), given the suspicion
        levels of the suspects it runs."""
        reply = await self._script(
            [self._queue, keys.free_slots()],
            [
                now_ms,
                in_progress_ms,
                self._read_limit,
                self._worker,
                free,
                self._stale_ms,
                len(suspects),
                "1" if "isolate" in suspects else "0",
                keys.arq_in_progress(""),
                keys.lease(""),
                keys.holder(""),
                keys.suspect(""),
                keys.worker_cases(""),
                keys.worker_suspects(""),
            ],
        )
        return [
            Claimed(job_id.decode(), int(float(score)), level.decode())
            for job_id, score, level in zip(reply[::3], reply[1::3], reply[2::3], strict=True)
        ]

    async def leave(self) -> None:
        """Drop this worker's free-slots entry (it claims no more)."""
        await self._redis.hdel(keys.free_slots(), self._worker)  # type: ignore[misc]
