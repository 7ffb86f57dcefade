"""The Lua time prelude: every script takes Redis's clock through the one piece in service/core/io/lua.py."""

from __future__ import annotations

import re
from pathlib import Path

from redis.asyncio import Redis

from service.core.io.lua import NOW
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
TIME_CALL = re.compile(r"""redis\.call\(\s*['"]TIME['"]""", re.IGNORECASE)


async def test_prelude_reads_redis_clock_in_ms_and_us(redis_server: RedisServer) -> None:
    """`now` and `now_us` are Redis's own clock, in milliseconds and microseconds, read at the call."""
    async with Redis.from_url(redis_server.url) as redis:
        before_s, before_us = await redis.time()
        now_ms, now_us = await redis.eval(f"{NOW}\nreturn {{now, now_us}}", 0)
        after_s, after_us = await redis.time()
    low_us, high_us = before_s * 1_000_000 + before_us, after_s * 1_000_000 + after_us
    assert low_us <= now_us <= high_us
    assert now_ms == now_us // 1000


def test_no_script_reads_time_but_the_prelude() -> None:
    """No production module calls Redis `TIME` in Lua itself: each script uses the prelude."""
    prelude = ROOT / "service" / "core" / "io" / "lua.py"
    copies = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("service", "workers")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != prelude
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if TIME_CALL.search(line)
    ]
    assert copies == [], f"Lua TIME read outside service/core/io/lua.py: {copies}"
