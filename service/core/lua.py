"""Pieces shared by the fleet's Redis Lua scripts (the scripts themselves live beside their callers).

Every script that needs the time takes it from Redis's `TIME` through `NOW`, so lease, lock,
breaker and permit arithmetic runs on one clock whatever the clocks of the fleet's machines say.
"""

from __future__ import annotations

NOW = """local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local now_us = t[1] * 1000000 + t[2]"""
"""Defines the Lua locals `now` (Redis's clock in milliseconds) and `now_us` (in microseconds)."""
