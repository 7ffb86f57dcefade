"""16. The daemon's reconciliation of a big store: what it costs the daemon's event loop, which its HTTP
API (status, the dashboard, submissions, metrics) and its lease renewal share.

A tuning of CASES case folders, UNFINISHED of them without a result and none in Redis (as after Redis
lost the queue), is reconciled by `Daemon.reconcile` (every `reconcile_interval_s`, 30 s by default)
while a ticker task measures the loop's longest stall (bench/big_system.py's `StallMeter`). The fleet
walks the case folders in a thread, and asks Redis about the cases and enqueues the orphans a chunk at a
time; the baseline is the same walk made on the loop, as the daemon did before 5 December, in the same
run.

    PYTHONPATH=. .venv/bin/python -m bench reconcile
"""

from __future__ import annotations

import asyncio
import time

from bench.big_system import StallMeter
from bench.common import Env, Figure, frozen_heap, run_async
from service.core.store import TuningStore
from service.daemon.main import Daemon
from service.kinds.cases.fleet import unfinished_cases
from tests.support.fleet import demo_adapter

NAME = "reconcile"
CASES = 20_000
UNFINISHED = 2_000
TARGET_MS = 100.0


def write_cases(tuning: TuningStore) -> None:
    """CASES case folders, each with its `case.json`; all but UNFINISHED of them with a result."""
    for n in range(CASES):
        folder = tuning.cases_dir / f"c{n:06d}" / "r1"
        folder.mkdir(parents=True)
        (folder / "case.json").write_text("{}")
        if n >= UNFINISHED:
            (folder / "result.json").write_text("{}")


async def measure(env: Env) -> tuple[float, float, int, float]:
    """(the fleet's longest stall ms, its reconcile s, cases enqueued, the walk-on-the-loop stall ms)."""
    name = await env.register(env.tuning([], adapter=demo_adapter()))
    async with env.client() as client:
        tuning = client.store.tuning(name)
        write_cases(tuning)
        daemon = Daemon(client)
        with frozen_heap():  # the loop measured is the harness's (as the daemon's, its start is frozen)
            async with StallMeter() as fleet:
                began = time.perf_counter()
                enqueued = await daemon.reconcile()
                took_s = time.perf_counter() - began
            async with StallMeter() as on_loop:
                await asyncio.sleep(0.01)
                unfinished_cases(tuning)
    return 1000 * fleet.longest_s, took_s, enqueued, 1000 * on_loop.longest_s


def run() -> list[Figure]:
    with Env(NAME) as env:
        fleet_ms, took_s, enqueued, loop_ms = run_async(measure(env))
    return [
        Figure(
            NAME,
            f"daemon's event loop's longest stall, reconciling {CASES:,} cases ({UNFINISHED:,} unfinished)",
            fleet_ms,
            "ms",
            loop_ms,
            "the walk of the case folders made on the loop",
            f"<= {TARGET_MS:g} ms",
            fleet_ms <= TARGET_MS,
            f"{enqueued:,} cases enqueued in {took_s:.2f} s ({enqueued / took_s:,.0f} cases/s, with their "
            "events); the stall is how long the API and the daemon's lease renewal wait at worst",
        )
    ]
