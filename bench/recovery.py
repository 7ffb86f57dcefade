"""7. Recovery: a worker is SIGKILLed while its case runs; the time until the case runs again on another
worker (median of 5), against a bare arq worker killed mid-job whose job has the same job_timeout as
tunefleet's lease (arq starts it again once its in-progress key expires: timeout + 10 s after start).

Five victims of each kind run one long case (job) each; a standby worker with free slots waits beside
them; each victim is killed at its own random moment. Recovery = the first step_started of the case
on the standby (or the job's second start) less the moment of the kill."""

from __future__ import annotations

import os
import random
import signal
import time

from bench import bare
from bench.common import (
    Env,
    Figure,
    event_time,
    median,
    run_async,
    simple_cases,
    wait_for,
)
from tests.support.fleet import demo_adapter

NAME = "recovery"
VICTIMS = 5
LEASE_S = 10.0
POLL_S = 0.05
JOB_S = 8.0


def _kill_at_random(pids: list[int], low: float, high: float) -> dict[int, float]:
    """SIGKILL each pid at its own random moment within [low, high] s from now; pid -> kill time."""
    began = time.time()
    plan = sorted((began + random.uniform(low, high), pid) for pid in pids)
    killed = {}
    for when, pid in plan:
        time.sleep(max(0.0, when - time.time()))
        os.kill(pid, signal.SIGKILL)
        killed[pid] = time.time()
    return killed


def measure_tunefleet() -> list[float]:
    with Env(NAME, lease_s=LEASE_S, poll_delay_s=POLL_S) as env:
        tuning = run_async(env.register(env.tuning([], adapter=demo_adapter(600_000, 600_000, 0))))
        victims = [env.start_worker(1) for _ in range(VICTIMS)]
        for proc in victims:
            env.wait_worker_ready(proc)
        run_async(env.submit(tuning, simple_cases(VICTIMS)))

        def started() -> dict[str, str]:
            return {e["worker"]: e["case"] for e in env.events() if e["kind"] == "step_started"}

        wait_for(lambda: len(started()) >= VICTIMS, 60, "every victim's step start")
        case_of = {int(w.rsplit(":", 1)[1]): c for w, c in started().items()}
        standby = env.start_worker(VICTIMS)
        env.wait_worker_ready(standby)
        killed = _kill_at_random([p.pid for p in victims], 0.5, LEASE_S / 3 + 0.5)
        for proc in victims:
            proc.wait()
        suffix = f":{standby.pid}"

        def resumed() -> dict[str, float]:
            out: dict[str, float] = {}
            for e in env.events():
                if e["kind"] == "step_started" and str(e["worker"]).endswith(suffix):
                    out.setdefault(e["case"], event_time(e))
            return out

        wait_for(lambda: len(resumed()) >= VICTIMS, 3 * LEASE_S + 10, "every case resumed", standby)
        again = resumed()
    return [again[case_of[pid]] - at for pid, at in killed.items()]


def measure_bare() -> list[float]:
    with Env(NAME + "-arq") as env:
        args = ["--max-jobs", "1", "--job-timeout", str(LEASE_S), "--poll-delay", str(POLL_S)]
        victims = [env.start_arq_worker(*args) for _ in range(VICTIMS)]
        for proc in victims:
            bare.wait_ready(env, proc)
        for n in range(VICTIMS):
            run_async(bare.enqueue_one(env, "mark", f"job{n}", time.time(), JOB_S))
        wait_for(lambda: len(bare.starts(env)) >= VICTIMS, 30, "every victim's job start")
        job_of = {r["pid"]: r["tag"] for r in bare.starts(env)}
        standby = env.start_arq_worker("--max-jobs", str(VICTIMS), *args[2:])
        bare.wait_ready(env, standby)
        killed = _kill_at_random([p.pid for p in victims], 0.5, 2.5)

        def restarted() -> dict[str, float]:
            return {r["tag"]: r["started"] for r in bare.starts(env) if r["pid"] == standby.pid}

        wait_for(lambda: len(restarted()) >= VICTIMS, LEASE_S + 25, "every job restarted", standby)
        again = restarted()
    return [again[job_of[pid]] - at for pid, at in killed.items()]


def _list(values: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in sorted(values))


def run() -> list[Figure]:
    tf = measure_tunefleet()
    arq = measure_bare()
    return [
        Figure(
            NAME,
            f"SIGKILL -> case runs elsewhere (median of {VICTIMS})",
            median(tf),
            "s",
            median(arq),
            f"bare arq, job_timeout {LEASE_S:g} s, killed {JOB_S:g} s job restarted",
            f"<= lease_s ({LEASE_S:g} s) + a poll",
            median(tf) <= LEASE_S + 1,
            f"lease_s {LEASE_S:g}, renewed every {LEASE_S / 3:.1f} s; "
            f"tunefleet {_list(tf)} s; arq {_list(arq)} s "
            "(arq: timeout + 10 s from the job's start, so a 30-day case timeout would mean 30 days)",
        )
    ]
