"""Driving the bare arq baseline: enqueue its jobs, wait for its worker, read what its jobs recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any, cast

from arq import create_pool
from arq.connections import RedisSettings

from bench.arq_worker import READY, STARTS
from bench.common import Env, wait_for

QUEUE = "arq:queue"


def wait_ready(env: Env, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    wait_for(
        lambda: bool(env.stats.client.sismember(READY, str(proc.pid))),
        timeout_s,
        "the bare arq worker's start",
        proc,
    )


async def enqueue(env: Env, function: str, count: int, *args: Any, in_flight: int = 1) -> float:
    """Enqueue `count` jobs with arq's own `enqueue_job`; the seconds it took."""
    pool = await create_pool(RedisSettings(port=env.port))
    try:
        began = time.perf_counter()
        if in_flight <= 1:
            for _ in range(count):
                await pool.enqueue_job(function, *args)
        else:
            sem = asyncio.Semaphore(in_flight)

            async def one() -> None:
                async with sem:
                    await pool.enqueue_job(function, *args)

            await asyncio.gather(*(one() for _ in range(count)))
        return time.perf_counter() - began
    finally:
        await pool.aclose()


async def enqueue_one(env: Env, function: str, *args: Any, job_id: str | None = None) -> None:
    pool = await create_pool(RedisSettings(port=env.port))
    try:
        await pool.enqueue_job(function, *args, _job_id=job_id)
    finally:
        await pool.aclose()


def starts(env: Env) -> list[dict[str, Any]]:
    """What the `mark` jobs recorded at their starts."""
    raw = cast(list[bytes], env.stats.client.lrange(STARTS, 0, -1))
    return [json.loads(item) for item in raw]


def queue_len(env: Env) -> int:
    return int(cast(int, env.stats.client.zcard(QUEUE)))
