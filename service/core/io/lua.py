"""Pieces shared by the fleet's Redis Lua scripts (the scripts themselves live beside their callers).

Every script that needs the time takes it from Redis's `TIME` through `NOW`, so lease, lock,
breaker and permit arithmetic runs on one clock whatever the clocks of the fleet's machines say.
"""

from __future__ import annotations

NOW = """local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local now_us = t[1] * 1000000 + t[2]"""
"""Defines the Lua locals `now` (Redis's clock in milliseconds) and `now_us` (in microseconds)."""


NEXT_TOKEN = f"""
local function next_token(fence)  -- the next fencing token from the counter `fence`
  {NOW}
  local token = redis.call('INCR', fence)
  if token < now_us then
    token = now_us
    redis.call('SET', fence, string.format('%d', token))
  end
  return string.format('%d', token)  -- as digits: Lua 5.1 would write a number this large as 1.7e+15
end
"""
"""Defines the Lua function `next_token(fence)`: the counter's next value, raised to Redis's clock in
microseconds, as a string of digits. So a token is above every token granted before it even when Redis
lost the counter's last grants (a restart from a snapshot taken before them, a failover to a replica
they had not reached yet): a holder whose grant was lost can never find a new holder's token equal to
its own, so its fenced writes are refused. (Redis's clock must not run back by more than the time the
loss took: a restart or a failover takes seconds; the fleet's machines keep their clocks within
milliseconds.)"""
