"""The improvements lock under real processes and real signals: mutual exclusion, fencing, expiry."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.core import keys
from service.core.io.connection import connect
from service.core.settings import FleetSettings
from tests.support.fleet import (
    Fleet,
    case,
    demo_adapter,
    event_time_s,
    settings_env,
    wait_until,
    write_tuning,
)
from tests.support.redis_server import RedisServer
from workers.lock import ImprovementsLock

CLIENT = str(Path(__file__).parent / "agents" / "lock_client.py")
HAMMERS = 22
HOLDS = 50


def spawn(settings: FleetSettings, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CLIENT, *args],
        env={**os.environ, **settings_env(settings), "PYTHONPATH": str(Path(__file__).parents[1])},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_many_processes_taking_the_lock_never_overlap(settings: FleetSettings, tmp_path: Path) -> None:
    """22 processes, let go at once, each take and release the lock 50 times at random; no two hold
    intervals overlap."""
    log = tmp_path / "holds.log"
    procs = [spawn(settings, "hammer", str(HOLDS), str(log)) for _ in range(HAMMERS)]
    for proc in procs:  # every one connected before any takes the lock: all 22 contend from the start
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    intervals = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == HAMMERS * HOLDS
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert end <= start, "two holders held the lock at once"


async def test_a_paused_holder_cannot_publish_after_another_took_the_lock(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SIGSTOP the holder past its lease; a second apply publishes; after SIGCONT the first is refused."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a")]))
    first = spawn(fleet.settings, "edit", "first")
    assert first.stdout is not None and first.stdout.readline().startswith("committed ")
    first.send_signal(signal.SIGSTOP)
    await wait_until(
        lambda: not redis_server.exists(keys.lock("t1")), 20, "the paused holder's lease to expire"
    )
    second = spawn(fleet.settings, "edit", "second")
    assert second.stdout is not None
    second_version = second.stdout.readline().split()[1]
    second.communicate("go\n", timeout=30)
    first.send_signal(signal.SIGCONT)
    out, _ = first.communicate("go\n", timeout=30)
    assert out.startswith("refused"), out
    assert redis_server.get(keys.version("t1")) == second_version.encode()
    repo = fleet.settings.store / "tunings" / "t1" / "system.git"
    shown = subprocess.run(
        ["git", f"--git-dir={repo}", "show", "main:rules.md"], capture_output=True, text=True
    )
    assert shown.stdout == "- rule: second\n"


async def test_a_killed_holder_frees_the_lock_within_lease_and_one_renewal(
    settings: FleetSettings, redis_server: RedisServer
) -> None:
    """SIGKILL the holder: another process takes the lock within the lease plus one renewal period."""
    holder = spawn(settings, "hold")
    assert holder.stdout is not None and holder.stdout.readline().startswith("holding")
    holder.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    holder.wait()
    pool = await connect(settings)
    lock = ImprovementsLock(pool, "t1", settings.lock_lease_s)
    try:
        while (hold := await lock.try_acquire()) is None:
            await asyncio.sleep(0.01)
        waited_s = time.monotonic() - killed_at
        assert hold.token > 0
    finally:
        await pool.aclose()
    assert waited_s <= settings.lock_lease_s * (1 + 1 / 3) + 0.2, waited_s
    assert redis_server.exists(keys.lock("t1"))


async def test_a_killed_workers_lock_lets_the_next_apply_start_within_5_s(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With the default lock lease, SIGKILL of the worker whose apply holds the lock: the apply waiting
    on another worker starts within 5 s of the kill."""
    default_lease_s = FleetSettings.model_fields["lock_lease_s"].default
    fleet.settings = fleet.settings.model_copy(update={"lock_lease_s": default_lease_s})
    cases = [case("a", rules=["a-1"]), case("b", rules=["b-1"])]
    adapter = demo_adapter(run_ms=100, analyze_ms=50, apply_ms=120_000)
    await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=adapter))
    workers = [fleet.start_worker(concurrency=1) for _ in range(2)]

    def applies(kind: str) -> list[dict[str, object]]:
        return [e for e in fleet.events() if e["kind"] == kind and e.get("step", "apply") == "apply"]

    await wait_until(lambda: len(applies("step_started")) == 1, 30, "the first apply to hold the lock")
    holder = applies("step_started")[0]
    waiter = "b" if holder["case"] == "a" else "a"
    await wait_until(
        lambda: any(e["case"] == waiter for e in applies("apply_waits_for_lock")),
        30,
        "the other apply to wait",
    )
    victim = next(w for w in workers if str(holder["worker"]).endswith(f":{w.pid}"))
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    victim.wait()
    await wait_until(lambda: len(applies("step_started")) == 2, 30, "the waiting apply to start")
    started = applies("step_started")[1]
    assert started["case"] == waiter
    assert event_time_s(started) - killed_at <= 5.0
