"""Evaluations: (1) eval items per second against cases per second on the same agents, through a real
worker process; (2) `tunefleet eval compare` of two evaluations of 10,000 items each.

(1) The same cases twice, each drained by the same kind of worker with zero-latency demo agents: as
cases of a tuning with `tries: 1`, so that each case is one run and one grade (it fails: a rule is
missing, and no apply follows the last try), and as the items of an evaluation of the same version
(one run and one grade each). Each round, two workers (each with a Redis of its own) are started,
left idle until ready, then frozen (SIGSTOP) while the work is queued, one the cases and the other the
items, then thawed together, so that the figures hold the drains only and both drains meet the
machine as it is at that moment (both workers on one core, their Redis servers on another). With
zero-latency agents a drain is bound by the worker's CPU; on a machine shared with other work even a
worker's CPU time per job swings by a fifth from minute to minute (drained one after the other, a
round's ratio went from 0.69 to 1.17), so the figure is jobs per second of the worker's CPU time
(/proc/<pid>/stat), of drains made side by side: what one more item costs the fleet against one more
case. The wall-clock rates are in the note; the target is on the median round's ratio.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Env, Figure, cpu_seconds, median, run_async, wait_for, zero_latency
from bench.profile import Profiler
from service.core.models.records import Usage
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.models import EvalCaseRef, EvalSpec, ItemResult
from service.kinds.evals.store import EvalStore
from tests.support.fleet import case

NAME = "evals"
CASES = 300
CONCURRENCY = 10
ROUNDS = 5
COMPARE_ITEMS = 10_000
MIN_RATIO = 0.95
MAX_COMPARE_S = 1.0


@dataclass
class _Drain:
    """A frozen worker with its work queued, and when that work is done."""

    pid: int
    done: Callable[[], bool]
    cpu_s: float = 0.0
    wall_s: float = 0.0


def _drain_together(drains: list[_Drain], timeout_s: float) -> None:
    """Thaw the frozen workers at once and wait until each is done, noting each one's CPU seconds and
    wall seconds at its own end."""
    cpu = [cpu_seconds(d.pid) for d in drains]
    began = time.monotonic()
    for drain in drains:
        os.kill(drain.pid, signal.SIGCONT)
    left = set(range(len(drains)))

    def all_done() -> bool:
        for i in sorted(left):
            if drains[i].done():
                drains[i].wall_s = time.monotonic() - began
                drains[i].cpu_s = cpu_seconds(drains[i].pid) - cpu[i]
                left.discard(i)
        return not left

    wait_for(all_done, timeout_s, "the drains", interval_s=0.01)


def _cases(round_no: int) -> list[dict[str, Any]]:
    return [case(f"r{round_no}-c{i:03d}", rules=[f"missing-{i}"]) for i in range(CASES)]


def _frozen_worker(env: Env) -> int:
    worker = env.start_worker(CONCURRENCY)
    env.wait_worker_ready(worker)
    time.sleep(0.3)
    os.kill(worker.pid, signal.SIGSTOP)
    return worker.pid


def _queue_cases(env: Env, round_no: int) -> _Drain:
    """CASES one-try cases queued for a frozen worker."""
    tuning = run_async(env.register(env.tuning([], adapter=zero_latency(), tries=1)))
    pid = _frozen_worker(env)
    run_async(env.submit(tuning, _cases(round_no)))
    return _Drain(pid, lambda: env.results_done() >= CASES)


def _queue_items(env: Env, round_no: int) -> _Drain:
    """An evaluation of the same cases (one repeat) queued for a frozen worker."""
    root = env.root / "tuning"
    tuning = run_async(env.register(env.tuning(_cases(round_no), adapter=zero_latency(), tries=1)))
    pid = _frozen_worker(env)

    async def create() -> str:
        async with env.client() as client:
            spec = await client.evals.create(tuning, cases=root / "cases", name="bench")
        return spec.id

    items = env.settings.store / "evals" / run_async(create()) / "items"
    return _Drain(pid, lambda: sum(1 for _ in items.glob("*/*/item.json")) >= CASES)


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process onto `cpus` (the threads it makes later inherit it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def measure_round(round_no: int) -> tuple[_Drain, _Drain]:
    """The cases and the items of one round, drained side by side by two workers (each with its own
    Redis), so that both meet the machine as it is at that moment: (cases, items). With two cores or
    more, both workers share the first, and their Redis servers the second."""
    with Env(f"{NAME}-cases") as cases_env, Env(f"{NAME}-items") as items_env:
        cases = _queue_cases(cases_env, round_no)
        items = _queue_items(items_env, round_no)
        if len(os.sched_getaffinity(0)) >= 2:
            first, second, *_ = sorted(os.sched_getaffinity(0))
            for env in (cases_env, items_env):
                assert env.redis_server.proc is not None
                _pin(env.redis_server.proc.pid, {second})
            for drain in (cases, items):
                _pin(drain.pid, {first})
        with Profiler(f"{NAME}-cases", cases.pid), Profiler(f"{NAME}-items", items.pid):
            _drain_together([cases, items], 300)
        return cases, items


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
    rounds = [measure_round(round_no) for round_no in range(ROUNDS)]
    cases = [(CASES / c.cpu_s, CASES / c.wall_s) for c, _ in rounds]
    items = [(CASES / i.cpu_s, CASES / i.wall_s) for _, i in rounds]
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
