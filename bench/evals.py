"""Evaluations: (1) eval items per second against cases per second on the same agents, through a real
worker process; (2) `tunefleet eval compare` of two evaluations of 10,000 items each.

(1) The same cases twice, each drained by the same kind of worker with zero-latency demo agents: as
cases of a tuning with `tries: 1`, so that each case is one run and one grade (it fails: a rule is
missing, and no apply follows the last try), and as the items of an evaluation of the same version
(one run and one grade each). The worker is started, left idle until ready, then frozen (SIGSTOP)
while the work is queued, so that the figures hold the drain only; the drains alternate, ROUNDS of
each. With zero-latency agents a drain is bound by the worker's CPU, and on a machine shared with
other work its wall time swings by a third from round to round, so the figure is jobs per second of
the worker's CPU time (/proc/<pid>/stat): what one more item costs the fleet against one more case.
The wall-clock rates are in the note; the target is on the median round's ratio.

(2) Two evaluations of 10,000 items are written as the workers write them (one folder and one
`item.json` per item), then compared as `tunefleet eval compare` does. The first read of an ended
evaluation walks its item folders and keeps its results (`RESULTS.json`); the figure is a compare
of two ended evaluations, whose results are kept; the walk is reported beside it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Env, Figure, cpu_seconds, median, run_async, wait_for, zero_latency
from service.core.models.records import Usage
from service.core.store import Store
from service.evals.fleet import EvalFiles
from service.evals.models import EvalCaseRef, EvalSpec, ItemResult
from service.evals.store import EvalStore
from tests.support.fleet import case

NAME = "evals"
CASES = 300
CONCURRENCY = 10
ROUNDS = 3
COMPARE_ITEMS = 10_000
MIN_RATIO = 0.95
MAX_COMPARE_S = 1.0


def _drain(env: Env, pid: int, done: Callable[[], bool], timeout_s: float) -> tuple[float, float]:
    """Thaw the frozen worker and wait until `done()`; (the worker's CPU seconds, wall seconds)."""
    cpu = cpu_seconds(pid)
    began = time.monotonic()
    os.kill(pid, signal.SIGCONT)
    wait_for(done, timeout_s, "the drain", interval_s=0.01)
    return cpu_seconds(pid) - cpu, time.monotonic() - began


def _cases(round_no: int) -> list[dict[str, Any]]:
    return [case(f"r{round_no}-c{i:03d}", rules=[f"missing-{i}"]) for i in range(CASES)]


def _frozen_worker(env: Env) -> int:
    worker = env.start_worker(CONCURRENCY)
    env.wait_worker_ready(worker)
    time.sleep(0.3)
    os.kill(worker.pid, signal.SIGSTOP)
    return worker.pid


def measure_cases(round_no: int) -> tuple[float, float]:
    """CASES one-try cases drained by a worker: (per CPU second, per wall second)."""
    with Env(f"{NAME}-cases") as env:
        tuning = run_async(env.register(env.tuning([], adapter=zero_latency(), tries=1)))
        pid = _frozen_worker(env)
        run_async(env.submit(tuning, _cases(round_no)))
        cpu, wall = _drain(env, pid, lambda: env.results_done() >= CASES, 300)
        return CASES / cpu, CASES / wall


def measure_items(round_no: int) -> tuple[float, float]:
    """An evaluation of the same cases (one repeat) drained by a worker: (per CPU second, per wall
    second)."""
    with Env(f"{NAME}-items") as env:
        root = env.root / "tuning"
        tuning_file = env.tuning(_cases(round_no), adapter=zero_latency(), tries=1)
        tuning = run_async(env.register(tuning_file))
        pid = _frozen_worker(env)

        async def create() -> str:
            async with env.client() as client:
                spec = await client.evals.create(tuning, cases=root / "cases", name="bench")
            return spec.id

        eval_id = run_async(create())
        items = env.settings.store / "evals" / eval_id / "items"
        cpu, wall = _drain(env, pid, lambda: sum(1 for _ in items.glob("*/*/item.json")) >= CASES, 300)
        return CASES / cpu, CASES / wall


def write_eval(root: Path, eval_id: str, passes: int) -> None:
    """An ended evaluation of COMPARE_ITEMS items, written as workers write them."""
    store = EvalStore(root / eval_id)
    refs = [EvalCaseRef(id=f"c{i:05d}", rev=1) for i in range(COMPARE_ITEMS)]
    store.write_spec(
        EvalSpec(
            id=eval_id,
            tuning="t1",
            version_asked="main",
            version="0" * 40,
            source="all",
            cases=refs,
            repeats=1,
            created_at=datetime.now(UTC),
        )
    )
    usage = Usage(input_tokens=840, output_tokens=360, cost_usd=0.0024)
    for i, ref in enumerate(refs):
        item = store.item(ref.id, 1, 1)
        item.root.mkdir(parents=True)
        verdict = "pass" if (i * passes) % 7 < 3 else "fail"
        item.write_outcome(
            ItemResult(
                case=ref.id,
                rev=1,
                repeat=1,
                state="graded",
                verdict=verdict,
                rubric={"correct": 1.0 if verdict == "pass" else 0.0, "brief": 1.0},
                usage=usage,
                version="0" * 40,
                at=datetime.now(UTC),
            )
        )


def measure_compare() -> tuple[float, float, int]:
    """(seconds of a compare of two ended evaluations, seconds of the first one that walks their
    folders, flips)."""
    with Env(f"{NAME}-compare") as env:
        store = Store(env.settings.store)
        files = EvalFiles(store)
        write_eval(files.folder.root, "before", 1)
        write_eval(files.folder.root, "after", 3)
        began = time.perf_counter()
        files.compare("before", "after")
        walk = time.perf_counter() - began
        times = []
        for _ in range(3):
            began = time.perf_counter()
            comparison = files.compare("before", "after")
            times.append(time.perf_counter() - began)
        return median(times), walk, len(comparison.flips)


def run() -> list[Figure]:
    cases, items = [], []
    for round_no in range(ROUNDS):
        cases.append(measure_cases(round_no))
        items.append(measure_items(round_no))
    ratios = [i[0] / c[0] for i, c in zip(items, cases, strict=True)]
    ratio = median(ratios)
    compare_s, walk_s, flips = measure_compare()
    return [
        Figure(
            NAME,
            "eval items per CPU second",
            median([i[0] for i in items]),
            "items/s",
            baseline=median([c[0] for c in cases]),
            baseline_label="one-try cases per CPU second of the worker, the same cases and agents",
            target=f"ratio >= {MIN_RATIO}",
            met=ratio >= MIN_RATIO,
            note=f"{CASES} items and {CASES} cases a round, {ROUNDS} rounds, zero-latency demo agents, one "
            f"worker of {CONCURRENCY} slots; median ratio {ratio:.3f} (rounds: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + "); wall clock: items "
            + ", ".join(f"{i[1]:.0f}" for i in items)
            + " /s, cases "
            + ", ".join(f"{c[1]:.0f}" for c in cases)
            + " /s",
        ),
        Figure(
            NAME,
            "eval compare, 10,000 items a side",
            compare_s,
            "s",
            target=f"< {MAX_COMPARE_S:g} s",
            met=compare_s < MAX_COMPARE_S,
            note=f"two ended evaluations of {COMPARE_ITEMS:,} items each, {flips:,} flips; the first "
            f"compare, which walks both evaluations' {2 * COMPARE_ITEMS:,} item folders and keeps their "
            f"results, took {walk_s:.2f} s",
        ),
    ]
