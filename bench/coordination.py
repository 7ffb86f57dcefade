"""4. Coordination capacity: 10,000 running cases heart-beating on their leases (JobLease.renew every
lease_s / 3, lease_s = 10) from a few processes, with the events and counters they write (one event
per case per 30 s), then also the background loops of the 100 workers that would run them
(concurrency 100: the breaker watch every poll of 0.2 s, presence every 2 s).

Redis's CPU share (INFO cpu used_cpu_sys + used_cpu_user over wall time) and its command rate, against
redis-benchmark's SET/ZADD rate on the same server in the same run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from typing import Any, cast

from bench.common import ROOT, Env, Figure, wait_for
from bench.coord_sim import READY, TUNING, case_name
from service.core.models.jobs import job_id_for

NAME = "coordination"
CASES = 10_000
PROCESSES = 3
WORKERS = 100
EVENT_EVERY_S = 30.0
WARMUP_S = 4.0
WINDOW_S = 12.0
MAX_CORE = 0.25


def _window(env: Env, seconds: float) -> dict[str, float]:
    cpu0, cmds0, reads0 = env.stats.cpu(), env.stats.commands(), env.stats.reads()
    began = time.monotonic()
    time.sleep(seconds)
    cpu1, cmds1, reads1 = env.stats.cpu(), env.stats.commands(), env.stats.reads()
    wall = time.monotonic() - began
    delta = cmds1 - cmds0
    return {
        "cpu": (cpu1 - cpu0) / wall,
        "commands": sum(delta.values()) / wall,
        "requests": (reads1 - reads0) / wall,
        "renewals": delta["pexpire"] / wall,
        "events": delta["xadd"] / wall,
    }


def redis_benchmark(port: int) -> dict[str, float]:
    out = subprocess.run(
        ["redis-benchmark", "-q", "-t", "set,zadd", "-n", "100000", "-p", str(port)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    rates = {}
    for name, rate in re.findall(r"(\w+): ([\d.]+) requests per second", out.replace("\r", "\n")):
        rates[name.lower()] = float(rate)
    return rates


def run() -> list[Figure]:
    with Env(NAME, poll_delay_s=0.2) as env:
        queue = env.settings.queue
        now_ms = int(time.time() * 1000)
        ids = {job_id_for(TUNING, case_name(i), 1): now_ms for i in range(CASES)}
        env.stats.client.zadd(queue, ids)
        (env.settings.store / "tunings" / TUNING).mkdir(parents=True)
        per = -(-CASES // PROCESSES)
        sims = []
        for p in range(PROCESSES):
            first = p * per
            count = min(per, CASES - first)
            workers = WORKERS // PROCESSES + (1 if p < WORKERS % PROCESSES else 0)
            args = ["--first", str(first), "--count", str(count), "--workers", str(workers)]
            args += ["--event-every-s", str(EVENT_EVERY_S), "--seconds", str(2 * WINDOW_S + WARMUP_S + 12)]
            sims.append(
                env.procs.add(
                    subprocess.Popen(
                        [sys.executable, "-m", "bench.coord_sim", *args],
                        env=env.child_env(),
                        stdout=subprocess.PIPE,
                        stderr=(env.root / f"sim-{p}.log").open("wb"),
                        cwd=ROOT,
                    )
                )
            )
        wait_for(
            lambda: int(cast(bytes, env.stats.client.get(READY) or b"0")) >= PROCESSES,
            120,
            "every lease taken",
        )
        time.sleep(WARMUP_S)
        leases = _window(env, WINDOW_S)
        for sim in sims:
            sim.send_signal(signal.SIGUSR1)
        time.sleep(3)
        fleet = _window(env, WINDOW_S)
        counts: list[dict[str, Any]] = []
        for sim in sims:
            out, _ = sim.communicate(timeout=60)
            counts.append(json.loads(out.decode().strip().splitlines()[-1]))
        capacity = redis_benchmark(env.port)
    lost = sum(c["lost"] for c in counts)
    cap = sum(capacity.values()) / max(1, len(capacity))
    cap_text = ", ".join(f"{k.upper()} {v:,.0f}/s" for k, v in capacity.items())
    intended = CASES / (env.settings.lease_s / 3)
    figures = []
    for label, got in (("leases + events", leases), (f"+ {WORKERS} workers' loops", fleet)):
        figures.append(
            Figure(
                NAME,
                f"Redis CPU, {CASES:,} cases: {label}",
                got["cpu"],
                "core",
                None,
                "",
                f"< {MAX_CORE} core",
                got["cpu"] < MAX_CORE,
                f"{got['renewals']:,.0f} renewals/s (intended {intended:,.0f}), {got['events']:.0f} events/s "
                f"(intended {CASES / EVENT_EVERY_S:.0f}); {lost} leases lost",
            )
        )
        figures.append(
            Figure(
                NAME,
                f"Redis request rate: {label}",
                got["requests"],
                "req/s",
                cap,
                f"redis-benchmark requests/s on the same server ({cap_text})",
                "",
                None,
                f"{got['commands']:,.0f} commands/s counting those run inside scripts; "
                f"{CASES * MAX_CORE / got['cpu']:,.0f} cases would fill a quarter core at this rate",
            )
        )
    return figures
