"""10. Autoscaling on queue depth: 1,000 demo cases whose steps take a random time, drained by real worker
processes that a KEDA-like controller scales between 1 and 8, against a fixed 8 workers.

The cases arrive in BURSTS equal bursts, one every `burst_every_s`, so that the fleet is busy, then
idle, then busy again: the controller has something to scale down between bursts and must scale up
again (a new worker process takes a second or two to start) at the next one.

Scaled down to run in about a minute on this machine: steps of tens of milliseconds (a long-tailed
random length per case) instead of minutes, and the controller polls every `period_s` (1.5 s) where
KEDA's default is 15 s. Each poll reads the metric KEDA would (the queue's sorted set: queued and
running cases, `ZCARD tf:queue`), wants ceil(depth / concurrency) workers within [1, 8] as the HPA
does for an AverageValue target, scales up at once, and scales down only after wanting fewer for a
whole `down_window_s` (the HPA's stabilization window, scaled like the period), one SIGTERM per
worker too many: the youngest workers go, and SIGTERM hands their cases back to the queue.

Reported: makespan and worker-seconds of both, cases handed back by scale-downs, cases marked
(a lost lease, a void, a result other than completed, or two results) and steps run twice (a
recorded step recorded again); both targets are 0.
"""

from __future__ import annotations

import argparse
import math
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from bench.common import Env, Figure, run_async
from service.core import logs
from service.core.models.case import Case
from tests.support.fleet import case, demo_adapter, steps_run_twice

NAME = "autoscale"
CASES = 1000
CONCURRENCY = 2
MIN_WORKERS = 1
MAX_WORKERS = 8
PERIOD_S = 1.5
DOWN_WINDOW_S = 3.0
MEAN_STEP_MS = 30.0
SLOW_SHARE = 0.05
SLOW_STEP_MS = (1000, 3000)
SEED = 13
BURSTS = 4
BURST_EVERY_S = 25.0


def random_cases(n: int, seed: int) -> list[dict[str, Any]]:
    """Cases that pass at once (4 steps each), each with its own random step length: exponential with
    mean MEAN_STEP_MS, except a SLOW_SHARE of slow cases (1-3 s a step, as an agent that thinks long);
    the adapter's jitter varies each step by up to half of it."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        slow = rng.random() < SLOW_SHARE
        step_ms = rng.randint(*SLOW_STEP_MS) if slow else int(rng.expovariate(1 / MEAN_STEP_MS))
        cases.append(case(f"c{i:05d}", latency_ms=step_ms))
    return cases


@dataclass
class Pool:
    """The worker processes of one run, and the worker-seconds they have cost so far."""

    env: Env
    live: list[tuple[subprocess.Popen[bytes], float]] = field(default_factory=list)
    stopping: list[tuple[subprocess.Popen[bytes], float]] = field(default_factory=list)
    spent_s: float = 0.0
    ups: int = 0
    downs: int = 0
    peak: int = 0

    def start(self) -> None:
        self.live.append((self.env.start_worker(CONCURRENCY), time.monotonic()))
        self.ups += 1
        self.peak = max(self.peak, len(self.live))

    def stop_youngest(self) -> None:
        proc, began = self.live.pop()
        proc.send_signal(signal.SIGTERM)
        self.stopping.append((proc, began))
        self.downs += 1

    def reap(self) -> None:
        for proc, began in list(self.stopping):
            if proc.poll() is not None:
                self.stopping.remove((proc, began))
                self.spent_s += time.monotonic() - began

    def close(self) -> float:
        """Stop every worker; the worker-seconds of the run."""
        now = time.monotonic()
        for proc, began in self.live + self.stopping:
            proc.kill()
            proc.wait()
            self.spent_s += now - began
        self.live, self.stopping = [], []
        return self.spent_s


@dataclass
class Outcome:
    makespan_s: float
    worker_s: float
    ups: int
    downs: int
    handed_back: int
    marked: int
    run_twice: int
    steps_redone: int
    max_workers: int


def desired(depth: int) -> int:
    """The HPA's answer for an AverageValue target of CONCURRENCY cases a worker, within the bounds."""
    return max(MIN_WORKERS, min(MAX_WORKERS, math.ceil(depth / CONCURRENCY))) if depth else MIN_WORKERS


def drain(
    env: Env, pool: Pool, autoscale: bool, period_s: float, down_window_s: float, bursts: list[list[Case]]
) -> float:
    """Submit the bursts on their schedule and run until every case has a result, scaling on each poll
    when `autoscale`; the makespan (from the first burst to the last result)."""
    n = sum(len(b) for b in bursts)
    began = time.monotonic()
    next_poll = began
    wanted_less_since: float | None = None
    pending = list(bursts)
    while env.results_done() < n:
        now = time.monotonic()
        if pending and now >= began + (len(bursts) - len(pending)) * BURST_EVERY_S:
            submit(env, pending.pop(0))
        if autoscale and now >= next_poll:
            next_poll = now + period_s
            depth = int(cast(int, env.stats.client.zcard(env.settings.queue)))
            want = desired(depth)
            if want > len(pool.live):
                wanted_less_since = None
                while len(pool.live) < want:
                    pool.start()
            elif want < len(pool.live):
                wanted_less_since = wanted_less_since if wanted_less_since is not None else now
                if now - wanted_less_since >= down_window_s:
                    while len(pool.live) > want:
                        pool.stop_youngest()
                    wanted_less_since = None
            else:
                wanted_less_since = None
        pool.reap()
        if now - began > 600:
            raise TimeoutError(f"{env.results_done()} of {n} cases done after 600 s")
        time.sleep(0.05)
    return time.monotonic() - began


def submit(env: Env, cases: list[Case]) -> None:
    async def go() -> None:
        async with env.client() as client:
            await client.submit_many("t1", cases)

    run_async(go())


def measure(autoscale: bool, n: int, period_s: float, down_window_s: float) -> Outcome:
    with Env(f"{NAME}-{'keda' if autoscale else 'fixed'}", poll_delay_s=0.05, lease_s=5.0) as env:
        run_async(env.register(env.tuning([], adapter=demo_adapter(0, 0, 0, jitter=0.5))))
        cases = [Case.model_validate(item) for item in random_cases(n, SEED)]
        size = math.ceil(n / BURSTS)
        bursts = [cases[i : i + size] for i in range(0, n, size)]
        pool = Pool(env)
        for _ in range(MIN_WORKERS if autoscale else MAX_WORKERS):
            pool.start()
        try:
            makespan_s = drain(env, pool, autoscale, period_s, down_window_s, bursts)
        finally:
            worker_s = pool.close()
        events = env.events()
        rows = env.fleet.results()
    kinds = Counter(e["kind"] for e in events)
    completed = Counter(e["case"] for e in events if e["kind"] == "case_completed")
    marked_cases = {e["case"] for e in events if e["kind"] in ("lease_lost", "attempt_set_aside")}
    marked_cases |= {c for c, row in rows.items() if row.state != "completed"}
    marked_cases |= {c for c, k in completed.items() if k > 1}
    starts = Counter(
        (e["case"], e["phase"], e["attempt"], e["step"]) for e in events if e["kind"] == "step_started"
    )
    return Outcome(
        makespan_s=makespan_s,
        worker_s=worker_s,
        ups=pool.ups,
        downs=pool.downs,
        handed_back=kinds["case_requeued"],
        marked=len(marked_cases),
        run_twice=sum(1 for c in rows if steps_run_twice(events, c)),
        steps_redone=sum(k - 1 for k in starts.values() if k > 1),
        max_workers=pool.peak,
    )


def run(n: int = CASES, period_s: float = PERIOD_S, down_window_s: float = DOWN_WINDOW_S) -> list[Figure]:
    keda = measure(True, n, period_s, down_window_s)
    fixed = measure(False, n, period_s, down_window_s)
    scale = (
        f"{n} cases in {BURSTS} bursts {BURST_EVERY_S:g} s apart, {CONCURRENCY} slots a worker, "
        f"polled every {period_s:g} s (KEDA: 15 s)"
    )
    return [
        Figure(
            NAME,
            "makespan, autoscaled 1-8 workers",
            keda.makespan_s,
            "s",
            fixed.makespan_s,
            "a fixed 8 workers",
            note=f"{scale}; scale-ups {keda.ups - MIN_WORKERS}, scale-downs {keda.downs}, at most "
            f"{keda.max_workers} workers; scale-down window {down_window_s:g} s",
        ),
        Figure(
            NAME,
            "worker-seconds, autoscaled",
            keda.worker_s,
            "s",
            fixed.worker_s,
            "a fixed 8 workers",
            note="worker processes alive x time, from the first worker's start to the last case's result "
            "(the cost autoscaling saves between bursts)",
        ),
        Figure(
            NAME,
            "cases handed back by scale-downs",
            keda.handed_back,
            "",
            target="any (SIGTERM hands back)",
            note=f"case_requeued events ('the worker stopped'); {keda.steps_redone} interrupted step "
            f"starts were run again from their start (fixed 8: {fixed.handed_back} handed back)",
        ),
        Figure(
            NAME,
            "cases marked",
            keda.marked,
            "",
            fixed.marked,
            "a fixed 8 workers",
            "0",
            keda.marked == 0,
            "a lost lease, a void, a result other than completed, or two results",
        ),
        Figure(
            NAME,
            "cases with a step run twice",
            keda.run_twice,
            "",
            fixed.run_twice,
            "a fixed 8 workers",
            "0",
            keda.run_twice == 0,
            "a recorded step recorded again (not counting the interrupted starts above)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscale", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=CASES)
    parser.add_argument("--period-s", type=float, default=PERIOD_S, help="the controller's poll (KEDA: 15)")
    parser.add_argument("--down-window-s", type=float, default=DOWN_WINDOW_S, help="(HPA: 300)")
    args = parser.parse_args(argv)
    logs.configure("console", "warning")
    for figure in run(args.cases, args.period_s, args.down_window_s):
        baseline = (
            "" if figure.baseline is None else f" (baseline {figure.baseline:.1f}: {figure.baseline_label})"
        )
        print(f"{figure.name}: {figure.value:.1f} {figure.unit}{baseline}; {figure.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
