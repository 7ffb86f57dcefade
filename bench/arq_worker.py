"""A bare arq worker process, the baseline of the benchmarks: arq 0.28 as it comes, no tunefleet code.

python -m bench.arq_worker --port PORT [--queue Q] [--max-jobs N] [--job-timeout S] [--poll-delay S]

Its jobs: `noop` does nothing; `mark` records when it started (RPUSH `bench:starts`) and then sleeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from arq import Worker, func
from arq.connections import RedisSettings

STARTS = "bench:starts"
READY = "bench:arq-ready"


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def mark(ctx: dict[str, Any], tag: str, sent_at: float, sleep_s: float) -> None:
    """Record the start (wall clock, this pid, arq's try number), then run for `sleep_s`."""
    started = time.time()
    record = {"tag": tag, "sent_at": sent_at, "started": started, "pid": os.getpid(), "try": ctx["job_try"]}
    await ctx["redis"].rpush(STARTS, json.dumps(record))
    if sleep_s > 0:
        await asyncio.sleep(sleep_s)


async def _ready(ctx: dict[str, Any]) -> None:
    await ctx["redis"].sadd(READY, str(os.getpid()))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.arq_worker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--queue", default="arq:queue")
    parser.add_argument("--max-jobs", type=int, default=10)
    parser.add_argument("--job-timeout", type=float, default=300)
    parser.add_argument("--poll-delay", type=float, default=0.05)
    args = parser.parse_args()
    worker = Worker(
        functions=[func(noop, name="noop"), func(mark, name="mark")],
        redis_settings=RedisSettings(port=args.port),
        queue_name=args.queue,
        max_jobs=args.max_jobs,
        job_timeout=args.job_timeout,
        poll_delay=args.poll_delay,
        keep_result=60,
        on_startup=_ready,
    )
    worker.run()


if __name__ == "__main__":
    main()
