"""One load process of the coordination benchmark: running cases as Redis sees them, with the
product's own code (workers.lease.JobLease, service.core.events.EventSink, the worker's breaker watch and
presence loop), without agents or a store of attempts.

python -m bench.coord_sim --first I --count N --workers W --event-every-s S --seconds T
(settings from TUNEFLEET_* as in a worker). It takes N leases, renews each every lease_s / 3 from a
random phase, emits one event per case every S seconds on average (step_started with the running
hash, or step_finished with its counters, in turn), and on SIGUSR1 starts the background loops of W
worker processes (breaker watch and pause/cancel watch every poll, presence every 2 s). At the end it
prints its counts as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from typing import Any

import structlog

from service.core import keys, logs
from service.core.events import EventSink
from service.core.io.batch import RedisBatch
from service.core.io.connection import connect
from service.core.models.events import EventKind
from service.core.models.jobs import job_id_for
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.registry import counter_rules
from workers.lease import JobLease
from workers.main import announce
from workers.runtime import WorkerRuntime

TUNING = "t1"
READY = "bench:sim-ready"


def case_name(i: int) -> str:
    return f"c{i:06d}"


class Counts:
    def __init__(self) -> None:
        self.renewals = 0
        self.events = 0
        self.lost = 0


async def keep(lease: JobLease, counts: Counts) -> None:
    """The lease's heartbeat (JobLease.renew every third of the lease), from a random phase."""
    interval_s = lease.lease_ms / 3000
    await asyncio.sleep(random.uniform(0, interval_s))
    while True:
        try:
            await lease.renew()
            counts.renewals += 1
        except Exception:
            counts.lost += 1
            return
        await asyncio.sleep(interval_s)


async def emit_events(sink: EventSink, first: int, count: int, every_s: float, counts: Counts) -> None:
    """One event per case every `every_s` on average, spread evenly: a step start (with the running
    hash, as the loop's `at` does) or a step end (moving its counters), in turn."""
    redis = sink.redis
    period = every_s / count
    began = time.monotonic()
    n = 0
    while True:
        i = first + random.randrange(count)
        name = case_name(i)
        if n % 2 == 0:
            state = {"case": name, "rev": 1, "worker": "sim", "step": "run", "phase": "nomem", "attempt": 1}
            await redis.hset(keys.running(TUNING), job_id_for(TUNING, name, 1), json.dumps(state))  # type: ignore[misc]
            await sink.emit(
                EventKind.STEP_STARTED, TUNING, case=name, rev=1, step="run", phase="nomem", attempt=1
            )
        else:
            await sink.emit(
                EventKind.STEP_FINISHED,
                TUNING,
                case=name,
                rev=1,
                step="run",
                phase="nomem",
                attempt=1,
                duration_ms=60_000,
                tokens=1200,
                cost_usd=0.0024,
                data={"outcome": "ran"},
            )
        counts.events += 1
        n += 1
        delay = began + n * period - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = FleetSettings()
    redis = await connect(settings)
    counts = Counts()
    sink = EventSink(redis, Store(settings.store), settings.events_max, counter_rules(settings), worker="sim")
    leases = []
    for i in range(args.first, args.first + args.count):
        lease, *_ = await JobLease.acquire(  # a batch of its own: no renewals share a round trip
            RedisBatch(redis), settings.queue, job_id_for(TUNING, case_name(i), 1), settings.lease_s, TUNING
        )
        if lease is None:
            raise RuntimeError(f"lease {i} held elsewhere")
        leases.append(lease)
    keepers: dict[str, asyncio.Task[object]] = {
        lease.job_id: asyncio.create_task(keep(lease, counts)) for lease in leases
    }
    tasks: list[asyncio.Task[Any]] = list(keepers.values())
    tasks.append(asyncio.create_task(emit_events(sink, args.first, args.count, args.event_every_s, counts)))
    await redis.incr(READY)

    def start_workers() -> None:
        """What run_worker runs beside the jobs of each worker process, each worker with its share
        of this process's cases as its running jobs."""
        ids = sorted(keepers)
        per = -(-len(ids) // max(1, args.workers))
        for w in range(args.workers):
            runtime = WorkerRuntime(settings, redis, name=f"sim-{args.first}-{w}")
            running = {job_id: keepers[job_id] for job_id in ids[w * per : (w + 1) * per]}
            tasks.append(asyncio.create_task(runtime.breaker_watch.watch()))
            tasks.append(asyncio.create_task(runtime.controls.watch(running)))
            tasks.append(asyncio.create_task(announce(redis, runtime)))

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, start_workers)
    await asyncio.sleep(args.seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await redis.aclose()
    return {"renewals": counts.renewals, "events": counts.events, "lost": counts.lost}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.coord_sim")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--event-every-s", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, required=True)
    logs.configure("json", "error")
    structlog.get_logger()
    print(json.dumps(asyncio.run(main(parser.parse_args()))), file=sys.stdout, flush=True)
