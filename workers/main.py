"""The worker process: `tunefleet worker` lands here."""

from __future__ import annotations

import asyncio
import time

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.io.connection import connect
from service.core.io.health import listen_health, serve_health
from service.core.io.heap import freeze_long_lived
from service.core.io.trees import folder_threads
from service.core.settings import FleetSettings
from workers.fleet_worker import FleetWorker
from workers.health import worker_checks
from workers.runtime import WorkerRuntime

log = structlog.get_logger()

PRESENCE_INTERVAL_S = 2.0


async def announce(redis: Redis, runtime: WorkerRuntime) -> None:
    """Keep the worker's presence and slots visible to status, until cancelled."""
    while True:
        try:
            async with redis.pipeline(transaction=False) as pipe:
                pipe.set(
                    keys.worker(runtime.name),
                    runtime.describe().model_dump_json(),
                    px=int(PRESENCE_INTERVAL_S * 3000),
                )
                pipe.zadd(keys.workers(), {runtime.name: int(time.time() * 1000)})
                await pipe.execute()
        except RedisError as exc:
            runtime.outage.failed("presence", exc)
        else:
            runtime.outage.answered()
        await asyncio.sleep(PRESENCE_INTERVAL_S)


PRESENCE_FORGET_S = 5.0
"""How long a stopping worker tries to take itself off the workers set before it leaves it be."""


async def forget_presence(redis: Redis, name: str) -> None:
    """Take a stopping worker off the workers set and its presence away. With Redis unreachable it leaves
    them, in one warning: the presence expires by itself within 3 beats and the daemon drops the set's entry
    once it is quiet (service.daemon.main.WORKER_QUIET_S), so a worker stopped during an outage still exits
    0 with no traceback."""
    try:
        async with asyncio.timeout(PRESENCE_FORGET_S):
            await redis.zrem(keys.workers(), name)
            await redis.delete(keys.worker(name))
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("worker_presence_left", worker=name, error=str(exc) or type(exc).__name__)


async def run_worker(settings: FleetSettings, *, burst: bool = False) -> None:
    """Claim and run cases until stopped (or, with burst, until the queue is empty); with `health_port`,
    serve /healthz and /readyz meanwhile."""
    health = listen_health(settings.health_host, settings.health_port) if settings.health_port else None
    try:
        redis = await connect(settings)
    except BaseException:
        if health is not None:
            health.close()
        raise
    asyncio.get_running_loop().set_default_executor(folder_threads())
    runtime = WorkerRuntime(settings, redis)
    worker = FleetWorker(runtime, burst=burst)
    try:
        await runtime.disk.start()  # before the first burst of records, which would wait for its start
        freeze_long_lived()  # what the start made lives as long as the worker (service.core.io.heap)
        log.info(
            "worker_started", worker=runtime.name, concurrency=settings.concurrency, queue=settings.queue
        )
        async with asyncio.TaskGroup() as group:
            helpers = [
                group.create_task(runtime.breaker_watch.watch()),
                group.create_task(runtime.store_watch.watch()),
                group.create_task(runtime.controls.watch(worker.job_tasks)),
                group.create_task(announce(redis, runtime)),
            ]
            if health is not None:
                helpers.append(group.create_task(serve_health(worker_checks(settings, worker), health)))
            try:
                await worker.run()
            finally:
                for task in helpers:
                    task.cancel()
    finally:
        await runtime.aclose()
        await forget_presence(redis, runtime.name)
        await redis.aclose()
        log.info(
            "worker_stopped", worker=runtime.name, complete=worker.jobs_complete, retried=worker.jobs_retried
        )
