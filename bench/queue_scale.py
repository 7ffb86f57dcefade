"""5. Scale of the queue: 100,000 cases submitted through the client (TunefleetClient.submit, which also
writes each case.json into the store), no worker running.

- Submission rate: the first SAMPLE cases one after the other in this process, against bare arq's
  `enqueue_job` one after the other on the same Redis, in ROUNDS turns of each. The rest is submitted
  by PROCESSES client processes at once, into a second store on tmpfs (/dev/shm) registered for the
  same tuning, to stay within the time budget (Redis sees the same); their rate is noted.
- Redis memory per queued case: INFO used_memory after the 100,000 less before, divided by them.
- Status at that size: `fleet_status` (median of 20 calls) and the `python -m service status --json`
  process (median of 3), each against the same on an empty fleet.
- What dominates a submission: the client's steps timed one by one on SPLIT more cases."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from bench import bare
from bench.common import ROOT, Env, Figure, median, run_async, simple_cases, zero_latency
from service.client import TunefleetClient
from service.events import EventSink
from service.models.case import Case
from service.models.jobs import CASE_FUNCTION, CaseJob
from service.queries import fleet_status

NAME = "queue_scale"
TOTAL = 100_000
SAMPLE = 5_000
PROCESSES = 4
BARE = 5_000
SPLIT = 1_000
ROUNDS = 5
MAX_BYTES = 1024
MAX_STATUS_MS = 50.0


async def status_ms(env: Env, calls: int = 20) -> float:
    async with env.client() as client:
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            await fleet_status(client.redis, env.settings.queue)
            times.append(time.perf_counter() - began)
    return median(times) * 1000


def cli_ms(env: Env, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "service", "status", "--json"],
            env=env.child_env(),
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - began)
    return median(times) * 1000


async def sequential(env: Env, tuning: str, cases: list[dict[str, Any]]) -> float:
    """Submit through the client one after the other; the seconds it took."""
    async with env.client() as client:
        began = time.perf_counter()
        for item in cases:
            await client.submit(tuning, Case.model_validate(item))
        return time.perf_counter() - began


async def batched(env: Env, tuning: str, cases: list[dict[str, Any]]) -> float:
    """Submit through `submit_many` (what `tunefleet submit` and the daemon use); the seconds it took."""
    models = [Case.model_validate(item) for item in cases]
    async with env.client() as client:
        began = time.perf_counter()
        await client.submit_many(tuning, models)
        return time.perf_counter() - began


async def split(env: Env, tuning: str) -> dict[str, float]:
    """Seconds per case of each part of a submission, timed apart: the store write, arq's enqueue_job,
    the event (file line, stream entry, counter)."""
    cases = [Case.model_validate(c) for c in simple_cases(SPLIT, prefix="split-")]
    async with env.client() as client:
        tuning_store = client.tuning_store(tuning)
        out = {}
        began = time.perf_counter()
        for case in cases:
            tuning_store.case(case.id, case.rev).write_case(case)
        out["case.json write"] = time.perf_counter() - began
        began = time.perf_counter()
        for case in cases:
            job = CaseJob(tuning=tuning, case=case.id, rev=case.rev)
            await client.redis.enqueue_job(CASE_FUNCTION, job.model_dump(), _job_id=job.job_id)
        out["enqueue_job"] = time.perf_counter() - began
        sink = EventSink(client.redis, client.store, env.settings.events_max)
        began = time.perf_counter()
        for case in cases:
            await sink.emit("case_queued", tuning, case=case.id, rev=case.rev)
        out["case_queued event"] = time.perf_counter() - began
    return {k: v / SPLIT for k, v in out.items()}


SHM = Path("/dev/shm")


async def fill_up(env: Env, store: Path, count: int) -> float:
    """Submit `count` cases from PROCESSES client processes into `store`; the seconds it took."""
    settings = env.settings.model_copy(update={"store": store})
    async with TunefleetClient(settings) as client:
        tuning = (await client.register(env.root / "tuning" / "tuning.yaml")).name
    child = {**env.child_env(), "TUNEFLEET_STORE": str(store)}
    return await asyncio.to_thread(_submitters, env, child, tuning, count)


def _submitters(env: Env, child: dict[str, str], tuning: str, count: int) -> float:
    began = time.perf_counter()
    procs = [
        env.procs.add(
            subprocess.Popen(
                [sys.executable, "-m", "bench.submitter", tuning, f"p{p}-", str(count // PROCESSES)],
                env=child,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
            )
        )
        for p in range(PROCESSES)
    ]
    for proc in procs:
        proc.wait(900)
    return time.perf_counter() - began


def run() -> list[Figure]:
    with Env(NAME) as env:
        tuning = run_async(env.register(env.tuning([], adapter=zero_latency())))
        empty_status = run_async(status_ms(env))
        empty_cli = cli_ms(env)
        mem0 = env.stats.memory()
        # The sample and the baseline in turns, so that both meet the same load on the machine.
        seconds = one_s = bare_s = 0.0
        bare_bytes = 0
        sample = simple_cases(SAMPLE, prefix="s")
        for r in range(ROUNDS):
            before = env.stats.memory()
            bare_s += run_async(bare.enqueue(env, "noop", BARE // ROUNDS))
            bare_bytes += env.stats.memory() - before
            chunk = sample[r * SAMPLE // ROUNDS : (r + 1) * SAMPLE // ROUNDS]
            half = len(chunk) // 2
            seconds += run_async(batched(env, tuning, chunk[half:]))
            one_s += run_async(sequential(env, tuning, chunk[:half]))
        rest = TOTAL - SAMPLE
        fill = Path(tempfile.mkdtemp(prefix="tunefleet-bench-", dir=SHM if SHM.is_dir() else env.root))
        try:
            parallel_s = run_async(fill_up(env, fill, rest))
        finally:
            shutil.rmtree(fill, ignore_errors=True)
        queued = int(cast(int, env.stats.client.zcard(env.settings.queue)))
        mem = env.stats.memory() - mem0 - bare_bytes
        usage = {key: env.stats.memory_usage(key) for key in (env.settings.queue, "tf:events")}
        job_key = env.stats.memory_usage("arq:job:case:t1:s000000:1")
        full_status = run_async(status_ms(env))
        full_cli = cli_ms(env)
        parts = run_async(split(env, tuning))
        bare_mem = bare_bytes / BARE
    rate = (SAMPLE - SAMPLE // 2) / seconds
    one_rate = (SAMPLE // 2) / one_s
    bare_rate = BARE / bare_s
    total_part = sum(parts.values())
    split_text = ", ".join(f"{k} {1000 * v:.2f} ms ({100 * v / total_part:.0f}%)" for k, v in parts.items())
    return [
        Figure(
            NAME,
            "submission rate (client submit_many, as `tunefleet submit`)",
            rate,
            "case/s",
            bare_rate,
            f"bare arq enqueue_job, sequential, {BARE:,} jobs in turns with the cases",
            ">= bare arq",
            rate >= bare_rate,
            f"half of the first {SAMPLE:,} cases in batches, half one `submit` at a time "
            f"({one_rate:,.0f} case/s); "
            f"the other {rest:,} from {PROCESSES} client processes at once, store on "
            f"tmpfs: {rest / parallel_s:,.0f} case/s. One submission, timed apart: {split_text}",
        ),
        Figure(
            NAME,
            "Redis memory per queued case",
            mem / queued,
            "B",
            bare_mem,
            "bare arq memory per queued no-op job",
            f"< {MAX_BYTES} B",
            mem / queued < MAX_BYTES,
            f"{queued:,} queued; queue zset {usage[env.settings.queue] / queued:.0f} B/case, event stream "
            f"{usage['tf:events'] / queued:.0f} B/case, one arq job record {job_key} B",
        ),
        Figure(
            NAME,
            f"fleet_status at {queued:,} queued",
            full_status,
            "ms",
            empty_status,
            "the same on an empty fleet",
            f"< {MAX_STATUS_MS:.0f} ms",
            full_status < MAX_STATUS_MS,
            "median of 20 calls",
        ),
        Figure(
            NAME,
            f"`python -m service status --json` at {queued:,} queued",
            full_cli,
            "ms",
            empty_cli,
            "the same on an empty fleet",
            "",
            None,
            "a whole process, median of 3: interpreter start and imports dominate",
        ),
    ]
