"""20. Soak: a fleet that runs for a long time stays flat. WORKERS workers (CONCURRENCY slots each) and a
daemon run BENCH_SOAK_CASES (default 50,000: 7 to 13 minutes on an idle 2-core machine) zero-latency demo
cases, fed by the harness as the queue drains (never more than QUEUE_MAX queued, so the queue's own size
stays level). One case in VOID_EVERY sets one void try aside and one in APPLY_EVERY needs an apply (a new
version, a new snapshot, a gate), so that `tunefleet gc` has something of its own to reclaim at the end.
The tuning has a gate that draws passed cases (no case breaks anything: the gate only keeps its index,
tf:gate-passed, growing per case).

Every SAMPLES-th of the cases it samples: the workers' and the daemon's RSS, Redis's `used_memory`, the
memory of Redis's keys less those bounded by design (BOUNDED: the figure that must stay flat), the
store's bytes and inodes per ended case, the bytes of `events.jsonl` per ended case, the gate's choice of
cases (`gate.cases.choose`, median of 20 draws of `sample` 20) and `fleet_status` (what `tunefleet
status` reads; median of 20). The daemon runs gc every GC_EVERY_S during the soak, retiring ended
evaluations older than GC_EVAL_AGE_S. Each figure's slope over the cases ended after the warm-up
(`warmup`), by least squares, per 10,000 cases and as a percent of its mean there: the workers' RSS is
flat under 1 % per 10,000 cases, Redis's keys less the bounded grow by under KEPT_MAX_B_PER_CASE a case.
Then `tunefleet gc` (dry, then --apply, every retention age 0) and what the store dropped, against what gc
said.

    BENCH_SOAK_CASES=4000 PYTHONPATH=. .venv/bin/python -m bench soak     # a quick run
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, Env, Figure, median, rss_mb, run_async
from service.client.gc import footprint
from service.client.queries import fleet_status
from service.core import keys
from service.core.models.acceptance import GateConfig
from service.core.models.case import Case
from service.kinds.evals.gate.cases import choose
from tests.support.fleet import case, demo_adapter

NAME = "soak"
CASES = int(os.environ.get("BENCH_SOAK_CASES", "50000"))
WORKERS = int(os.environ.get("BENCH_SOAK_WORKERS", "4"))
CONCURRENCY = 8
SAMPLES = 10
WARMUP_SHARE = 0.2
WARMUP_PER_WORKER = 5_000
"""The warm-up is the first fifth of the cases, and at least this many per worker: a worker's RSS rises by
about 14 MiB over its first 4,000 to 6,000 cases and then levels off (a single worker of 8 slots: 194 MiB
at 1,300 cases, 208 at 6,000, 209 to 210 from 8,400 to 10,800), while its Python heap, traced after a
full collection, stays at 7.4 to 9.1 MB throughout; the rise is the same with glibc's malloc for every
object and `malloc_trim` every 5 s, and with jemalloc (docs/benchmarks.md, "Soak")."""
QUEUE_MAX = 1_000
BATCH = 250
VOID_EVERY = 20
APPLY_EVERY = int(os.environ.get("BENCH_SOAK_APPLY_EVERY", "200"))
"""One case in this many needs an apply (a rule added to the instructions): the instructions grow by one rule
per APPLY_EVERY cases, and every run reads them."""
GATE = GateConfig(cases="passed", sample=20)
FLAT_PCT = 1.0
KEPT_KEYS = "Redis keys, less the bounded (MiB)"
KEPT_MAX_B_PER_CASE = 1.0
"""The most Redis's keys less the bounded (KEPT_KEYS) may grow per case ended, in bytes. A leak of one key
per case, or of one member per case in a set, hash or sorted set, reads 48 B or more per case (MEMORY USAGE
on Redis 7.0: a string key 56 B, a member of 1,000 in a set 48 B, in a hash 56 B, in a sorted set 102 B).
Not a percent of the figure, as the others: the figure is about a tenth of a MiB, the keys of the cases in
flight at a sample, and swings by ±0.04 MiB, so a percent of it measures what a sample caught (+3.3 % and
+1.1 % on 8 December, -82 % before); over a fit of 40,000 cases that swing moves this slope by about 0.1 B
per case."""
GATE_MAX_MS = 10.0
BOUNDED = ("arq:result:", "arq:job:", "arq:retry:", "arq:in-progress:", "arq:queue", "tf:queue", "tf:events",
           "tf:gate-passed:")  # fmt: skip
"""Keys bounded by design, left out of the Redis figure: arq's result records (kept 24 h: over a soak
shorter than a day they grow with the cases, and level off after a day), the queued jobs (at most
QUEUE_MAX), the capped event stream, and the gate's index (one member per passed case, by design)."""
GC_EVERY_S = 10.0
"""The daemon runs `tunefleet gc --apply` this often during the soak (`gc_interval_s`), as a fleet that runs
for days would: it retires the gate's ended evaluations from Redis (kept in the store)."""
GC_EVAL_AGE_S = 10.0
"""During the soak, an ended evaluation is retired once this old (`retention_eval_item_age_s`; a day's
default would outlast the soak), long after its gate read it (a gate reads its evaluation's folder,
which gc keeps, not Redis: service.client.gc.evals_redis)."""
AGES = {f"TUNEFLEET_RETENTION_{w}_AGE_S": "0" for w in ("SNAPSHOT", "CANDIDATE", "EVAL_ITEM", "VOID")}


def soak_case(n: int) -> dict[str, object]:
    if n % APPLY_EVERY == APPLY_EVERY - 1:
        return case(f"s{n:06d}", rules=[f"rule-{n:06d}"])
    if n % VOID_EVERY == VOID_EVERY - 1:
        return case(f"s{n:06d}", voids={"nomem-1": 1})
    return case(f"s{n:06d}")


@dataclass
class Sample:
    ended: int
    values: dict[str, float]


@dataclass
class Soak:
    env: Env
    workers: list[int] = field(default_factory=list)
    daemon: int = 0
    samples: list[Sample] = field(default_factory=list)

    @property
    def cases_dir(self) -> Path:
        return self.env.settings.store / "tunings" / "t1" / "cases"

    async def ended(self) -> int:
        async with self.env.client() as client:
            counts = await client.redis.hmget(  # type: ignore[misc]
                keys.stats("t1"), [f"state:{s}" for s in ("completed", "difficult", "failed", "cancelled")]
            )
        return sum(int(c or 0) for c in counts)

    async def sample(self, ended: int) -> None:
        size, inodes = await asyncio.to_thread(footprint, self.cases_dir)
        events = self.env.settings.store / "tunings" / "t1" / "events.jsonl"
        values = {
            "worker RSS (MiB, mean)": sum(rss_mb(p) for p in self.workers) / len(self.workers),
            "worker RssAnon (MiB, mean)": sum(rss_mb(p, "RssAnon") for p in self.workers) / len(self.workers),
            "daemon RSS (MiB)": rss_mb(self.daemon),
            "Redis used_memory (MiB)": self.env.stats.memory() / 2**20,
            KEPT_KEYS: self.kept_keys_bytes() / 2**20,
            "store bytes per case": size / ended,
            "store inodes per case": inodes / ended,
            "events.jsonl bytes per case": events.stat().st_size / ended,
            "gate choice (ms)": await self.gate_ms(),
            "status (ms)": await self.status_ms(),
            "load average (1 min)": os.getloadavg()[0],
        }
        self.samples.append(Sample(ended, values))
        shown = "  ".join(f"{k}={v:.3g}" for k, v in values.items())
        print(f"   soak {ended:>6} ended  {shown}", file=sys.stderr, flush=True)

    def kept_keys_bytes(self) -> int:
        """The MEMORY USAGE of every key but those bounded by design (BOUNDED): what the fleet keeps per
        case, per evaluation or per anything else that comes and goes. Redis's `used_memory` also holds
        the allocator's slack and the clients' buffers, which swing by megabytes between samples."""
        client = self.env.stats.client
        found = [bytes(k).decode() for k in client.scan_iter(count=1000)]
        kept = [k for k in found if not k.startswith(BOUNDED)]
        with client.pipeline(transaction=False) as pipe:
            for key in kept:
                pipe.memory_usage(key, samples=0)
            return sum(int(n or 0) for n in pipe.execute())

    async def gate_ms(self) -> float:
        async with self.env.client() as client:
            tuning = client.tuning_store("t1")
            await choose(client.redis, GATE, tuning, frozenset(), "")  # fills the index once
            times = []
            for k in range(20):
                began = time.perf_counter()
                await choose(client.redis, GATE, tuning, frozenset(), f"s{k:06d}")
                times.append(time.perf_counter() - began)
        return median(times) * 1000

    async def status_ms(self) -> float:
        async with self.env.client() as client:
            times = []
            for _ in range(20):
                began = time.perf_counter()
                await fleet_status(client.redis, self.env.settings.queue)
                times.append(time.perf_counter() - began)
        return median(times) * 1000


async def feed_and_sample(soak: Soak) -> float:
    """Submit the cases as the queue drains, sampling every CASES/SAMPLES ended; the seconds it ran."""
    env = soak.env
    submitted = 0
    every = max(CASES // SAMPLES, 1)
    next_sample = every
    began = time.monotonic()
    async with env.client() as client:
        while True:
            queued = int(await client.redis.zcard(env.settings.queue))
            while submitted < CASES and queued < QUEUE_MAX:
                batch = [
                    Case.model_validate(soak_case(n)) for n in range(submitted, min(submitted + BATCH, CASES))
                ]
                await client.submit_many("t1", batch)
                submitted += len(batch)
                queued += len(batch)
            ended = await soak.ended()
            if ended >= next_sample:
                await soak.sample(ended)
                next_sample = (ended // every + 1) * every
            if ended >= CASES:
                return time.monotonic() - began
            await asyncio.sleep(0.5)


def warmup() -> int:
    """The cases ended before the slopes are read (WARMUP_PER_WORKER)."""
    return max(round(WARMUP_SHARE * CASES), WARMUP_PER_WORKER * WORKERS)


def slope_pct(samples: list[Sample], name: str) -> tuple[float, float]:
    """The least-squares slope of `name` against cases ended, after warm-up: per 10,000 cases, and that as
    a percent of the mean value there."""
    kept = [s for s in samples if s.ended >= warmup()] or samples
    xs = [float(s.ended) for s in kept]
    ys = [s.values[name] for s in kept]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    per_10k = slope * 10_000
    return per_10k, (100 * per_10k / my if my else 0.0)


def kept_keys_growth(per_10k_mib: float, last_mib: float) -> Figure:
    """KEPT_KEYS's slope as bytes per case ended, against KEPT_MAX_B_PER_CASE."""
    per_case_b = per_10k_mib * 2**20 / 10_000
    return Figure(
        NAME,
        "Redis keys, less the bounded: growth per case ended",
        per_case_b,
        "B",
        target=f"< {KEPT_MAX_B_PER_CASE:g} B",
        met=per_case_b < KEPT_MAX_B_PER_CASE,
        note=f"the slope of {KEPT_KEYS} after warm-up; last {last_mib:.4g} MiB (a key a case: 48 B or more)",
    )


def tunefleet_gc(env: Env, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "service", "gc", "--json", *args],
        env=env.child_env(**AGES),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def gc_figures(env: Env) -> list[Figure]:
    """`tunefleet gc` dry, then --apply, and the store's drop against what it said."""
    store = env.settings.store
    said = tunefleet_gc(env)
    before = footprint(store)
    applied = tunefleet_gc(env, "--apply")
    after = footprint(store)
    removals = list(applied["removals"])  # type: ignore[call-overload]
    by_kind: dict[str, int] = {}
    for removal in removals:
        by_kind[removal["kind"]] = by_kind.get(removal["kind"], 0) + 1
    said_inodes = sum(r["inodes"] for r in said["removals"])  # type: ignore[attr-defined]
    freed_bytes = sum(r["bytes"] for r in removals)
    freed_inodes = sum(r["inodes"] for r in removals)
    net_bytes = freed_bytes - int(applied["added_bytes"])  # type: ignore[call-overload]
    net_inodes = freed_inodes - int(applied["added_inodes"])  # type: ignore[call-overload]
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(by_kind.items()))
    return [
        Figure(
            NAME,
            "gc --apply: inodes freed",
            freed_inodes,
            "inodes",
            note=f"{kinds}; the dry run said {said_inodes}",
        ),
        Figure(
            NAME,
            "gc --apply: bytes freed",
            freed_bytes,
            "B",
            note=f"of {before[0]:,} B, {before[1]:,} inodes",
        ),
        Figure(
            NAME,
            "gc: store's drop less what gc said",
            float((before[0] - after[0] - net_bytes) + (before[1] - after[1] - net_inodes)),
            "B+inodes",
            target="0",
            met=(before[0] - after[0], before[1] - after[1]) == (net_bytes, net_inodes),
            note="what `du` saw the store drop, less what gc reported (freed, less what it wrote: "
            f"{applied['added_bytes']:,} B of retired evaluations' progress)",
        ),
    ]


def run() -> list[Figure]:
    with Env(
        NAME, events_max=10_000, gc_interval_s=GC_EVERY_S, retention_eval_item_age_s=GC_EVAL_AGE_S
    ) as env:
        root = env.root / "tuning"
        tuning_file = env.tuning(
            [], adapter=demo_adapter(0, 0, 0), gate={"cases": GATE.cases, "sample": GATE.sample}
        )
        daemon = env.fleet.start_daemon(tuning_file)
        env.procs.add(daemon)
        soak = Soak(env, daemon=daemon.pid)
        for _ in range(WORKERS):
            proc = env.start_worker(CONCURRENCY)
            env.wait_worker_ready(proc)
            soak.workers.append(proc.pid)
        assert root.is_dir()
        took_s = run_async(feed_and_sample(soak))
        figures = [
            Figure(
                NAME,
                "cases ended",
                float(CASES),
                "cases",
                note=f"in {took_s:.0f} s, {WORKERS} workers x {CONCURRENCY}",
            )
        ]
        last = soak.samples[-1].values
        for name in last:
            per_10k, pct = slope_pct(soak.samples, name)
            flat = name.startswith("worker RSS")
            if name.startswith("load"):
                continue
            if name == KEPT_KEYS:
                figures.append(kept_keys_growth(per_10k, last[name]))
            figures.append(
                Figure(
                    NAME,
                    f"{name}: slope per 10k cases",
                    pct,
                    "%",
                    target=f"< {FLAT_PCT:g} %" if flat else "",
                    met=pct < FLAT_PCT if flat else None,  # memory given back is no leak
                    note=f"{per_10k:+.4g} per 10,000 cases; last {last[name]:.4g}",
                )
            )
        gate_ms = last["gate choice (ms)"]
        figures.append(
            Figure(
                NAME,
                "gate choice at the largest size",
                gate_ms,
                "ms",
                target=f"<= {GATE_MAX_MS:g} ms",
                met=gate_ms <= GATE_MAX_MS,
            )
        )
        env.fleet.teardown()
        env.procs.kill_all()
        figures += gc_figures(env)
        return figures
