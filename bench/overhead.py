"""1. Overhead per step: the whole case loop with zero-latency demo agents through a real worker
process, against a bare arq no-op job drained by a bare arq worker process on the same Redis.

Both workers are started, left idle until ready, then frozen (SIGSTOP) while their work is queued,
so that the figures hold the draining only: the worker's CPU time (/proc/<pid>/stat) and the Redis
commands it sent (MONITOR: commands sent by clients apart from those run inside Lua scripts).
The drains alternate, ROUNDS of tunefleet between ROUNDS + 1 of arq, and the CPU figure is the
median round's ratio: on a shared machine one drain can be off by a third."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from typing import Any

from bench import bare
from bench.common import (
    Env,
    Figure,
    Monitor,
    apply_cases,
    client_addr,
    cpu_times,
    median,
    run_async,
    simple_cases,
    steps_of,
    versions_used,
    wait_for,
    zero_latency,
)
from bench.profile import Profiler

NAME = "overhead"
SIMPLE = 80
WITH_APPLY = 20
CONCURRENCY = 10
BARE_JOBS = 2000
MAX_CPU_JOBS = 5
MAX_COMMANDS = 10
ROUNDS = 3


def _drain(
    env: Env, worker: subprocess.Popen[bytes], done: Any, timeout_s: float
) -> tuple[float, float, Monitor, int, float]:
    """Thaw the frozen worker and wait until `done()` (a worker that exits meanwhile fails the bench at
    once, with its exit status); (CPU seconds, wall seconds, commands seen, round trips: requests Redis
    read less the harness's own, system CPU seconds)."""
    pid = worker.pid
    monitor = Monitor(env.port, ignore={client_addr(env.stats.client)})
    reads0 = env.stats.reads()
    with Profiler(env.name, pid):
        user0, sys0 = cpu_times(pid)
        began = time.monotonic()
        os.kill(pid, signal.SIGCONT)
        wait_for(done, timeout_s, "the drain", worker, interval_s=0.01)
        wall = time.monotonic() - began
        user1, sys1 = cpu_times(pid)
        cpu = user1 + sys1 - user0 - sys0
    monitor.stop()
    reads = env.stats.reads() - reads0 - monitor.ignored - 1
    return cpu, wall, monitor, reads, sys1 - sys0


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

    cpu, wall, monitor, reads, system = _drain(env, worker, finished, 300)
    events = env.events()
    steps = steps_of(events)
    total = sum(steps.values())
    store = env.settings.store / "tunings" / tuning
    versions = versions_used(events, store)
    folders = [p for p in (store / "snapshots").iterdir() if not p.name.startswith(".")]
    audit = env.audit()
    git_per_apply = len(audit) / max(1, steps["apply"])
    return {
        "steps": total,
        "by_step": dict(steps),
        "cpu": cpu,
        "system": system,
        "wall": wall,
        "top": monitor.top,
        "lua": monitor.lua,
        "reads": reads,
        "runs": steps["run"],
        "versions": len(versions),
        "folders": len(folders),
        "extractions": env.extractions(),
        "git_per_apply": git_per_apply,
    }


def measure_bare(env: Env) -> dict[str, Any]:
    worker = env.start_arq_worker("--max-jobs", str(CONCURRENCY))
    bare.wait_ready(env, worker)
    time.sleep(0.3)
    os.kill(worker.pid, signal.SIGSTOP)
    run_async(bare.enqueue(env, "noop", BARE_JOBS))
    cpu, wall, monitor, reads, _ = _drain(env, worker, lambda: bare.queue_len(env) == 0, 120)
    return {
        "jobs": BARE_JOBS,
        "cpu": cpu,
        "wall": wall,
        "top": monitor.top,
        "lua": monitor.lua,
        "reads": reads,
    }


def _top(counter: Counter[str], per: float, n: int = 8) -> str:
    return ", ".join(f"{name} {count / per:.1f}" for name, count in counter.most_common(n))


def _per(results: list[dict[str, Any]], key: str, per: str) -> float:
    return median([float(r[key]) / int(r[per]) for r in results])


def run() -> list[Figure]:
    """ROUNDS drains of each, interleaved (arq, tunefleet, arq, ..., arq): the CPU ratio is the median
    of each tunefleet round against the mean of the arq rounds on either side of it."""
    arqs: list[dict[str, Any]] = []
    tfs: list[dict[str, Any]] = []
    for _ in range(ROUNDS):
        with Env(NAME + "-arq") as env:
            arqs.append(measure_bare(env))
        with Env(NAME) as env:
            tfs.append(measure_tunefleet(env))
    with Env(NAME + "-arq") as env:
        arqs.append(measure_bare(env))
    cpu_steps = [t["cpu"] / t["steps"] * 1000 for t in tfs]
    cpu_jobs = [a["cpu"] / a["jobs"] * 1000 for a in arqs]
    ratios = [c / ((cpu_jobs[i] + cpu_jobs[i + 1]) / 2) for i, c in enumerate(cpu_steps)]
    middle = sorted(range(ROUNDS), key=lambda i: ratios[i])[ROUNDS // 2]
    tf = tfs[middle]  # the round with the median ratio gives the breakdowns
    steps = tf["steps"]
    cpu_step = cpu_steps[middle]
    cpu_job = cpu_step / ratios[middle]
    trips_step = _per(tfs, "reads", "steps")
    trips_job = _per(arqs, "reads", "jobs")
    top_step = sum(tf["top"].values()) / steps
    lua_step = sum(tf["lua"].values()) / steps
    top_job = median([sum(a["top"].values()) / a["jobs"] for a in arqs])
    by_step = ", ".join(f"{k} {v}" for k, v in sorted(tf["by_step"].items()))
    rounds = ", ".join(f"{c:.2f} ms / {r:.1f}x" for c, r in zip(cpu_steps, ratios, strict=True))
    arq_cpu = ", ".join(f"{c:.2f}" for c in cpu_jobs)
    return [
        Figure(
            NAME,
            "worker CPU per step",
            cpu_step,
            "ms",
            cpu_job,
            f"bare arq CPU per no-op job, the mean of the drains before and after the median round "
            f"(every drain: {arq_cpu} ms; {BARE_JOBS} jobs each)",
            f"<= {MAX_CPU_JOBS} bare jobs",
            ratios[middle] <= MAX_CPU_JOBS,
            f"median of {ROUNDS} rounds ({rounds}); that round: {steps} steps ({by_step}) of "
            f"{SIMPLE + WITH_APPLY} cases in {tf['cpu']:.2f} CPU-s, "
            f"{100 * tf['system'] / tf['cpu']:.0f}% of it in the kernel (system time)",
        ),
        Figure(
            NAME,
            "wall time per step",
            _per(tfs, "wall", "steps") * 1000,
            "ms",
            _per(arqs, "wall", "jobs") * 1000,
            "bare arq wall per no-op job",
            "",
            None,
            f"{CONCURRENCY} cases at once on one worker (arq: {CONCURRENCY} jobs at once); "
            f"the inverse of the drain rate; medians of the rounds",
        ),
        Figure(
            NAME,
            "Redis round trips per step",
            trips_step,
            "rt",
            trips_job,
            "bare arq round trips per job",
            f"<= {MAX_COMMANDS}",
            trips_step <= MAX_COMMANDS,
            "requests Redis read (INFO stats total_reads_processed; a pipeline is one); round medians",
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
            f"sent by clients (MONITOR), +{lua_step:.1f} more run inside Lua scripts; "
            f"per step: {_top(tf['top'], steps)}; in scripts: {_top(tf['lua'], steps, 5)}",
        ),
        Figure(
            NAME,
            "snapshot extractions per version",
            tf["extractions"] / max(1, tf["versions"]),
            "x",
            None,
            "",
            "1 (not per run)",
            tf["extractions"] <= tf["versions"] and tf["folders"] == tf["versions"],
            f"{tf['versions']} versions used (runs, apply bases), {tf['folders']} snapshot folders, "
            f"{tf['extractions']} extractions for {tf['runs']} runs on 1 worker; "
            f"git processes per apply: {tf['git_per_apply']:.1f}",
        ),
    ]
