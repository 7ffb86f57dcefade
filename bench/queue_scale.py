"""5. Scale of the queue: 100,000 cases submitted through the client (which also writes each case.json
into the store), no worker running.

- Submission rate, judged on `submit_many` (what `tunefleet submit` and the daemon use) against bare
  arq's `enqueue_job` one after the other on the same Redis, in ROUNDS rounds of BARE_ROUND arq jobs,
  BATCHED_ROUND cases in one `submit_many` call and ONE_ROUND cases through `submit` one at a time (an
  informative row). The three take turns in an order that rotates from round to round, so that none
  always meets the machine first; each client is connected and the cases validated before its clock
  starts. The rate is the count over the summed seconds; the notes give each round's ratio.
- No mass deletion right before the measurement: ext4 without a journal does not hand out an inode
  freed in the last 30 s and scans past every such inode at each creation (`recently_deleted`); making
  case folders and files right after removing 30,000 to 400,000 inodes nearby measured 1.3 to 1.8 times
  slower. So nothing is deleted on that disk before the rounds: the bulk of the cases goes to tmpfs, this
  benchmark's folder goes to the harness's trash (emptied when the run ends), and when there is no trash
  (so it may have been emptied just now) the rounds wait until var/bench has not changed for
  INODE_REUSE_S (a run right after another waits up to 30 s). Other processes' deletions during the
  rounds are not under its control.
- The rest up to TOTAL is submitted by PROCESSES client processes at once (`bench.submitter`, through
  `submit_many`), into a second store on tmpfs (/dev/shm) registered for the same tuning, to stay within
  the time budget (Redis sees the same); their rate is noted.
- Redis memory per queued case: INFO used_memory after the 100,000 less before (less bare arq's jobs),
  divided by them.
- Status at that size: `fleet_status` (median of 20 calls) and the `python -m service status --json`
  process (median of 3), each against the same on an empty fleet.
- What dominates a submission: on SPLIT more cases, the stages of `submit_many` one after the other
  (without its overlap), and the parts of one `submit`."""

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
from bench.common import ROOT, TRASH, Env, Figure, median, run_async, simple_cases, zero_latency
from service.client.client import SUBMIT_BATCH, TunefleetClient
from service.client.queries import fleet_status
from service.core.events import EventSink
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.jobs import CASE_FUNCTION, CaseJob
from service.kinds.registry import counter_rules

NAME = "queue_scale"
TOTAL = 100_000
ROUNDS = 5
BARE_ROUND = 2_000
BATCHED_ROUND = 2_000
ONE_ROUND = 400
PROCESSES = 4
SPLIT = 1_000
MAX_BYTES = 1024
MAX_STATUS_MS = 50.0
INODE_REUSE_S = 30.0
"""How long ext4 (without a journal) keeps a freed inode from being reused, scanning past it instead."""
SHM = Path("/dev/shm")


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


def settle() -> float:
    """Wait until the last mass deletion in var/bench is INODE_REUSE_S old; the seconds waited. While
    the trash exists nothing was deleted since the run began; without it, var/bench's last change
    (the trash's removal, or a folder's) is taken as the last deletion."""
    base = TRASH.parent
    if TRASH.exists() or not base.is_dir():
        return 0.0
    wait_s = INODE_REUSE_S - (time.time() - base.stat().st_mtime)
    if wait_s > 0:
        time.sleep(wait_s)
    return max(wait_s, 0.0)


async def one_at_a_time(env: Env, tuning: str, cases: list[dict[str, Any]]) -> float:
    """Submit through `submit`, one case after the other; the seconds it took."""
    models = [Case.model_validate(item) for item in cases]
    async with env.client() as client:
        began = time.perf_counter()
        for case in models:
            await client.submit(tuning, case)
        return time.perf_counter() - began


async def batched(env: Env, tuning: str, cases: list[dict[str, Any]]) -> float:
    """Submit through one `submit_many` call (what `tunefleet submit` and the daemon use); the seconds."""
    models = [Case.model_validate(item) for item in cases]
    async with env.client() as client:
        began = time.perf_counter()
        await client.submit_many(tuning, models)
        return time.perf_counter() - began


async def stages(env: Env, tuning: str) -> dict[str, float]:
    """Seconds per case of each stage of `submit_many`, one after the other in batches of SUBMIT_BATCH
    (the product overlaps the first with the others): the case files (temp files from the threads, one
    syncfs, folders and names, one more syncfs), the enqueue script of each case in one round trip, and
    the case_queued events in another."""
    cases = [Case.model_validate(c) for c in simple_cases(SPLIT, prefix="t")]
    out = dict.fromkeys(["case files", "enqueue", "events"], 0.0)
    async with env.client() as client:
        tuning_store = client.tuning_store(tuning)
        for start in range(0, SPLIT, SUBMIT_BATCH):
            batch = cases[start : start + SUBMIT_BATCH]
            stores = [tuning_store.case(case.id, case.rev) for case in batch]
            began = time.perf_counter()
            done = await client._write_cases(tuning_store.root, stores, batch)
            enqueued = time.perf_counter()
            accepted = await client._enqueue_batch(tuning, stores, batch, done)
            emitting = time.perf_counter()
            await client._emit_queued(tuning, batch, done, accepted)
            out["case files"] += enqueued - began
            out["enqueue"] += emitting - enqueued
            out["events"] += time.perf_counter() - emitting
    return {k: v / SPLIT for k, v in out.items()}


async def parts(env: Env, tuning: str) -> dict[str, float]:
    """Seconds per case of each part of one `submit`, timed apart on SPLIT cases: the store write (an
    fsync'd atomic write), arq's enqueue_job, the event (file line, stream entry, counter)."""
    cases = [Case.model_validate(c) for c in simple_cases(SPLIT, prefix="p")]
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
        sink = EventSink(client.redis, client.store, env.settings.events_max, counter_rules(env.settings))
        began = time.perf_counter()
        for case in cases:
            await sink.emit(EventKind.CASE_QUEUED, tuning, case=case.id, rev=case.rev)
        out["case_queued event"] = time.perf_counter() - began
    return {k: v / SPLIT for k, v in out.items()}


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
        if proc.returncode != 0:
            raise RuntimeError(f"submitter {proc.pid} exited {proc.returncode}")
    return time.perf_counter() - began


def turn(env: Env, tuning: str, contender: str, r: int) -> float:
    """One contender's turn in round `r`; the seconds it took."""
    if contender == "bare":
        return cast(float, run_async(bare.enqueue(env, "noop", BARE_ROUND)))
    if contender == "batched":
        return cast(float, run_async(batched(env, tuning, simple_cases(BATCHED_ROUND, prefix=f"b{r}-"))))
    return cast(float, run_async(one_at_a_time(env, tuning, simple_cases(ONE_ROUND, prefix=f"o{r}-"))))


def rounds(env: Env, tuning: str) -> tuple[dict[str, float], list[float], int]:
    """The submission rounds: seconds per contender in all, the batched / bare ratio of each round, and
    the bytes bare arq's jobs added to Redis."""
    contenders = ["bare", "batched", "one"]
    seconds = dict.fromkeys(contenders, 0.0)
    ratios: list[float] = []
    bare_bytes = 0
    for r in range(ROUNDS):
        took = {}
        for contender in contenders[r % 3 :] + contenders[: r % 3]:
            before = env.stats.memory()
            took[contender] = turn(env, tuning, contender, r)
            if contender == "bare":
                bare_bytes += env.stats.memory() - before
            seconds[contender] += took[contender]
        ratios.append((BATCHED_ROUND / took["batched"]) / (BARE_ROUND / took["bare"]))
    return seconds, ratios, bare_bytes


def run() -> list[Figure]:
    waited_s = settle()
    with Env(NAME) as env:
        tuning = run_async(env.register(env.tuning([], adapter=zero_latency())))
        empty_status = run_async(status_ms(env))
        empty_cli = cli_ms(env)
        mem0 = env.stats.memory()
        seconds, ratios, bare_bytes = rounds(env, tuning)
        rest = TOTAL - ROUNDS * (BATCHED_ROUND + ONE_ROUND)
        fill = Path(tempfile.mkdtemp(prefix="tunefleet-bench-", dir=SHM if SHM.is_dir() else env.root))
        try:
            parallel_s = run_async(fill_up(env, fill, rest))
        finally:
            shutil.rmtree(fill, ignore_errors=True)
        queued = int(cast(int, env.stats.client.zcard(env.settings.queue)))
        mem = env.stats.memory() - mem0 - bare_bytes
        usage = {key: env.stats.memory_usage(key) for key in (env.settings.queue, "tf:events")}
        job_key = env.stats.memory_usage("arq:job:case:t1:b0-000000:1")
        full_status = run_async(status_ms(env))
        full_cli = cli_ms(env)
        batch_parts = run_async(stages(env, tuning))
        one_parts = run_async(parts(env, tuning))
    bare_rate = ROUNDS * BARE_ROUND / seconds["bare"]
    rate = ROUNDS * BATCHED_ROUND / seconds["batched"]
    one_rate = ROUNDS * ONE_ROUND / seconds["one"]
    baseline = (
        f"bare arq enqueue_job, one after the other, {ROUNDS} x {BARE_ROUND:,} jobs in turns with the cases"
    )
    setup = (
        f"{ROUNDS} rounds, order rotating (arq, submit_many, submit); waited {waited_s:.0f} s for the last "
        f"deletion in var/bench to be {INODE_REUSE_S:.0f} s old. "
    )
    return [
        Figure(
            NAME,
            "submission rate (client `submit_many`, as `tunefleet submit`)",
            rate,
            "case/s",
            bare_rate,
            baseline,
            ">= bare arq",
            rate >= bare_rate,
            setup
            + f"{ROUNDS} x {BATCHED_ROUND:,} cases, one call each; ratio per round "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f". The other {rest:,} from {PROCESSES} client processes at once (submit_many), store on "
            f"tmpfs: {rest / parallel_s:,.0f} case/s. Stages apart, per case: {_shares(batch_parts)}",
        ),
        Figure(
            NAME,
            "submission rate (client `submit`, one at a time)",
            one_rate,
            "case/s",
            bare_rate,
            baseline,
            "",
            None,
            setup + f"{ROUNDS} x {ONE_ROUND:,} cases. One submission, timed apart: {_shares(one_parts)}",
        ),
        Figure(
            NAME,
            "Redis memory per queued case",
            mem / queued,
            "B",
            bare_bytes / (ROUNDS * BARE_ROUND),
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


def _shares(parts: dict[str, float]) -> str:
    total = sum(parts.values())
    return ", ".join(f"{k} {1000 * v:.3f} ms ({100 * v / total:.0f}%)" for k, v in parts.items())
