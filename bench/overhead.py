"""1. Overhead per step: the whole case loop with zero-latency demo agents through a real worker
process, against a bare arq no-op job drained by a bare arq worker process on the same Redis.

Both workers are started, left idle until ready, then frozen (SIGSTOP) while their work is queued,
so that the figures hold the draining only: the worker's CPU time (/proc/<pid>/stat) and the Redis
commands it sent (MONITOR: commands sent by clients apart from those run inside Lua scripts)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

from bench import bare
from bench.profile import Profiler
from bench.common import (
    Env,
    Figure,
    Monitor,
    apply_cases,
    client_addr,
    cpu_seconds,
    run_async,
    simple_cases,
    steps_of,
    wait_for,
    zero_latency,
)

NAME = "overhead"
SIMPLE = 80
WITH_APPLY = 20
CONCURRENCY = 10
BARE_JOBS = 2000
MAX_CPU_JOBS = 5
MAX_COMMANDS = 10


def _drain(env: Env, pid: int, done: Any, timeout_s: float) -> tuple[float, float, Monitor]:
    """Thaw the frozen worker and wait until `done()`; (CPU seconds, wall seconds, commands seen)."""
    monitor = Monitor(env.port, ignore={client_addr(env.stats.client)})
    with Profiler(env.name, pid):
        cpu0 = cpu_seconds(pid)
        began = time.monotonic()
        os.kill(pid, signal.SIGCONT)
        wait_for(done, timeout_s, "the drain", interval_s=0.01)
        wall = time.monotonic() - began
        cpu = cpu_seconds(pid) - cpu0
    monitor.stop()
    return cpu, wall, monitor


def measure_tunefleet(env: Env) -> dict[str, Any]:
    tuning = run_async(env.register(env.tuning([], adapter=zero_latency())))
    cases = simple_cases(SIMPLE) + apply_cases(WITH_APPLY)
    worker = env.start_worker(CONCURRENCY)
    env.wait_worker_ready(worker)
    time.sleep(0.5)
    os.kill(worker.pid, signal.SIGSTOP)
    run_async(env.submit(tuning, cases))

    def finished() -> bool:
        return env.results_done() >= len(cases) and env.stats.client.zcard(env.settings.queue) == 0

    cpu, wall, monitor = _drain(env, worker.pid, finished, 300)
    events = env.events()
    steps = steps_of(events)
    total = sum(steps.values())
    store = env.settings.store / "tunings" / tuning
    versions = {e["data"]["version"] for e in events if e["kind"] == "step_started" and e["step"] == "run"}
    folders = [p for p in (store / "snapshots").iterdir() if not p.name.startswith(".")]
    audit = env.audit()
    archives = sum(1 for a in audit if a["git"] == "archive")
    git_per_apply = sum(1 for a in audit if a["git"] != "archive") / max(1, steps["apply"])
    return {
        "steps": total,
        "by_step": dict(steps),
        "cpu": cpu,
        "wall": wall,
        "top": monitor.top,
        "lua": monitor.lua,
        "runs": steps["run"],
        "versions": len(versions),
        "folders": len(folders),
        "archives": archives,
        "git_per_apply": git_per_apply,
    }


def measure_bare(env: Env) -> dict[str, Any]:
    worker = env.start_arq_worker("--max-jobs", str(CONCURRENCY))
    bare.wait_ready(env, worker)
    time.sleep(0.3)
    os.kill(worker.pid, signal.SIGSTOP)
    run_async(bare.enqueue(env, "noop", BARE_JOBS))
    cpu, wall, monitor = _drain(env, worker.pid, lambda: bare.queue_len(env) == 0, 120)
    return {"jobs": BARE_JOBS, "cpu": cpu, "wall": wall, "top": monitor.top, "lua": monitor.lua}


def _top(counter: Counter[str], per: float, n: int = 6) -> str:
    return ", ".join(f"{name} {count / per:.1f}" for name, count in counter.most_common(n))


def run() -> list[Figure]:
    with Env(NAME) as env:
        tf = measure_tunefleet(env)
    with Env(NAME + "-arq") as env:
        arq = measure_bare(env)
    steps = tf["steps"]
    cpu_step = tf["cpu"] / steps * 1000
    cpu_job = arq["cpu"] / arq["jobs"] * 1000
    top_step = sum(tf["top"].values()) / steps
    lua_step = sum(tf["lua"].values()) / steps
    top_job = sum(arq["top"].values()) / arq["jobs"]
    lua_job = sum(arq["lua"].values()) / arq["jobs"]
    by_step = ", ".join(f"{k} {v}" for k, v in sorted(tf["by_step"].items()))
    return [
        Figure(
            NAME,
            "worker CPU per step",
            cpu_step,
            "ms",
            cpu_job,
            "bare arq CPU per no-op job",
            f"<= {MAX_CPU_JOBS} bare jobs",
            cpu_step <= MAX_CPU_JOBS * cpu_job,
            f"{steps} steps ({by_step}) in {tf['cpu']:.2f} CPU-s; arq {arq['jobs']} jobs in {arq['cpu']:.2f}",
        ),
        Figure(
            NAME,
            "wall time per step",
            tf["wall"] / steps * 1000,
            "ms",
            arq["wall"] / arq["jobs"] * 1000,
            "bare arq wall per job",
            "",
            None,
            f"{CONCURRENCY} cases at once on one worker; arq: {CONCURRENCY} jobs at once",
        ),
        Figure(
            NAME,
            "Redis commands per step",
            top_step,
            "cmd",
            top_job,
            "bare arq commands per job",
            f"<= {MAX_COMMANDS}",
            top_step <= MAX_COMMANDS,
            f"sent by clients; +{lua_step:.1f} inside scripts (arq: +{lua_job:.1f}); "
            f"top: {_top(tf['top'], steps)}",
        ),
        Figure(
            NAME,
            "snapshot extractions per version",
            tf["archives"] / max(1, tf["versions"]),
            "x",
            None,
            "",
            "1 (not per run)",
            tf["archives"] <= tf["versions"] and tf["folders"] == tf["versions"],
            f"{tf['versions']} versions, {tf['folders']} snapshot folders, {tf['archives']} git archive, "
            f"{tf['runs']} runs, 1 worker; git processes per apply {tf['git_per_apply']:.1f}",
        ),
    ]
