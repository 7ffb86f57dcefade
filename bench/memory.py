"""8. Memory: a worker's resident memory (VmRSS) with 200 cases in flight (demo steps long enough that
every case is mid-run), against a bare arq worker running 200 sleeping jobs."""

from __future__ import annotations

import time

from bench import bare
from bench.common import Env, Figure, rss_mb, run_async, simple_cases, wait_for
from tests.support.fleet import demo_adapter

NAME = "memory"
CASES = 200
MAX_MB = 200.0


def measure_tunefleet() -> tuple[float, float]:
    """(RSS idle, RSS with CASES in flight), MiB."""
    with Env(NAME) as env:
        tuning = run_async(env.register(env.tuning([], adapter=demo_adapter(600_000, 600_000, 0))))
        worker = env.start_worker(CASES)
        env.wait_worker_ready(worker)
        time.sleep(0.5)
        idle = rss_mb(worker.pid)
        run_async(env.submit(tuning, simple_cases(CASES)))

        def in_flight() -> int:
            return sum(1 for e in env.events() if e["kind"] == "step_started")

        wait_for(lambda: in_flight() >= CASES, 120, f"{CASES} cases in flight", worker, interval_s=0.2)
        time.sleep(1.0)
        busy = rss_mb(worker.pid)
    return idle, busy


def measure_bare() -> float:
    with Env(NAME + "-arq") as env:
        worker = env.start_arq_worker("--max-jobs", str(CASES), "--job-timeout", "600")
        bare.wait_ready(env, worker)
        run_async(bare.enqueue(env, "mark", CASES, "mem", time.time(), 600.0))
        wait_for(lambda: len(bare.starts(env)) >= CASES, 60, "every bare job started", worker)
        time.sleep(1.0)
        return rss_mb(worker.pid)


def run() -> list[Figure]:
    idle, busy = measure_tunefleet()
    base = measure_bare()
    return [
        Figure(
            NAME,
            f"worker RSS, {CASES} cases in flight",
            busy,
            "MiB",
            base,
            f"bare arq worker, {CASES} jobs running",
            f"< {MAX_MB:.0f} MiB",
            busy < MAX_MB,
            f"idle worker {idle:.0f} MiB; {(busy - idle) * 1024 / CASES:.0f} KiB per case in flight",
        )
    ]
