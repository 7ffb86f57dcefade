"""What every benchmark shares: the figure it reports, a private Redis and store, worker processes,
and readings of a process's CPU and memory and of Redis's own counters."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import redis

from service.client.client import TunefleetClient
from service.core.io.heap import freeze_long_lived
from service.core.models.case import Case
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, kill_all, settings_env, write_tuning
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
TRASH = ROOT / "var" / "bench" / ".trash"
"""Where finished benchmarks' folders go until the run ends. On ext4 without a journal (these
machines), every file created within ~30 s of a mass deletion pays for scanning the freed inodes
(`recently_deleted`, seen with perf); deleting one benchmark's store right before the next one
measures would charge the harness's own cleanup to the next benchmark's figures."""
HOOKS = Path(__file__).resolve().parent / "hooks"
PROFILES = ROOT / "var" / "bench" / "profiles"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Figure:
    """One row of the table: a measured value beside a baseline measured in the same run."""

    bench: str
    name: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    target: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    def as_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "ratio": self.ratio,
            "target": self.target,
            "met": self.met,
            "note": self.note,
        }


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def family(pid: int) -> list[int]:
    """A process and the helper processes that work for it and would be missed by reading its pid
    alone: a worker's disk writer (service.core.io.durable, the child that lands its records), found among
    the children its threads started (/proc/<pid>/task/*/children). Its agents are not counted: bare
    arq runs none."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children = [int(child) for child in task.read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
        for child in children:
            try:
                if b"service/core/io/durable.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                    pids.append(child)
            except OSError:  # gone meanwhile
                continue
    return pids


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a live process (its threads included) and of its helper processes
    (`family`), from /proc/<pid>/stat."""
    user = system = 0.0
    for member in family(pid):
        fields = _stat_fields(member)
        user += int(fields[11]) / CLOCK_TICKS
        system += int(fields[12]) / CLOCK_TICKS
    return user, system


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (its threads included) and of its helper processes."""
    return sum(cpu_times(pid))


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a live process and of its helper processes (`family`) in MiB: VmRSS, or one of
    its parts (`RssAnon`: the heap and other private memory; `RssFile`: mapped files)."""
    return sum(_rss_mb(member, field) for member in family(pid))


def _rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linearly interpolated."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class RedisStats:
    """Readings of one Redis server's own counters (synchronous, for the harness)."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(port=port)

    def info(self, section: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.client.info(section))

    def cpu(self) -> float:
        info = self.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def commands(self) -> Counter[str]:
        """Calls per command name so far (commands run inside scripts included)."""
        stats = self.info("commandstats")
        return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})

    def reads(self) -> int:
        """Read events Redis processed so far: one per request a client sent (a pipeline is one)."""
        return int(self.info("stats")["total_reads_processed"])

    def memory_usage(self, key: str) -> int:
        return int(cast(int | None, self.client.memory_usage(key)) or 0)

    def memory(self) -> int:
        return int(self.info("memory")["used_memory"])

    def close(self) -> None:
        self.client.close()


class Monitor:
    """Counts the commands Redis executes while it runs, from MONITOR: those sent by clients (round
    trips at most; a pipeline sends several in one) apart from those run inside Lua scripts."""

    def __init__(self, port: int, ignore: set[str] | None = None) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.sendall(b"MONITOR\r\n")
        self.top: Counter[str] = Counter()
        self.lua: Counter[str] = Counter()
        self.ignored = 0
        self.ignore = ignore or set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        while not self._stop.is_set():
            try:
                chunk = self._sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for line in lines:
                self._count(line)

    def _count(self, line: bytes) -> None:
        # +1712345678.123456 [0 127.0.0.1:40000] "evalsha" "..."
        if not line.startswith(b"+") or b"[" not in line:
            return
        source = line[line.index(b"[") + 1 : line.index(b"]")].split(b" ", 1)[-1].decode()
        rest = line[line.index(b"]") + 2 :]
        name = rest.split(b'"', 2)[1].decode().lower() if rest.startswith(b'"') else "?"
        if source == "lua":
            self.lua[name] += 1
        elif source in self.ignore:
            self.ignored += 1
        else:
            self.top[name] += 1

    def stop(self) -> None:
        time.sleep(0.2)  # let the last lines arrive
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=2)


def client_addr(client: redis.Redis) -> str:
    """This connection's address as Redis names it (to leave the harness's own commands out)."""
    return str(cast(dict[str, Any], client.client_info())["addr"])


@dataclass
class Procs:
    """Processes started by a benchmark, killed at its end whatever happens."""

    items: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def add(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.items.append(proc)
        return proc

    def kill_all(self) -> None:
        kill_all(self.items)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The harness's heap frozen out of the collector's full passes for a measurement of its own event
    loop, then given back: a worker's or the daemon's loop walks only what came after its start
    (service.core.io.heap), while the harness's holds what every bench before made (a full pass over it took
    60 ms after the benches of `make bench`, 190 ms with 600,000 objects)."""
    freeze_long_lived()
    try:
        yield
    finally:
        gc.unfreeze()


def discard(folder: Path) -> None:
    """Move a folder to the trash (a rename frees no inode), to be deleted when the run ends."""
    TRASH.mkdir(parents=True, exist_ok=True)
    folder.rename(TRASH / folder.name)


def empty_trash() -> None:
    shutil.rmtree(TRASH, ignore_errors=True)


class Env:
    """One benchmark's world: a folder, a private redis-server on a free port, fleet settings, processes."""

    def __init__(self, name: str, **overrides: Any) -> None:
        self.name = name
        base = ROOT / "var" / "bench"
        base.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
        self.redis_server = RedisServer(self.root / "redis")
        self.procs = Procs()
        self.audit_log = self.root / "audit.log"
        values: dict[str, Any] = {
            "store": self.root / "store",
            "poll_delay_s": 0.05,
            "redis_connect_attempts": 3,
            **overrides,
        }
        self.settings = FleetSettings(redis_url=self.redis_server.url, **values)
        self.fleet = Fleet(self.settings, self.root / "logs")
        self.stats = RedisStats(self.redis_server.port)

    def __enter__(self) -> Self:
        self.redis_server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.fleet.teardown()
        self.procs.kill_all()
        self.stats.close()
        self.redis_server.stop()
        if exc is None and not os.environ.get("BENCH_KEEP"):
            discard(self.root)

    @property
    def port(self) -> int:
        return self.redis_server.port

    def child_env(self, **extra: str) -> dict[str, str]:
        """The environment of a process of this benchmark: the fleet's settings and the audit hook."""
        path = os.pathsep.join([str(HOOKS), str(ROOT), os.environ.get("PYTHONPATH", "")])
        return {
            **os.environ,
            **settings_env(self.settings),
            "PYTHONPATH": path,
            "BENCH_AUDIT_LOG": str(self.audit_log),
            "TUNEFLEET_LOG_FORMAT": "json",
            **({"BENCH_CPROFILE": str(PROFILES)} if os.environ.get("BENCH_PROFILE") == "cprofile" else {}),
            **extra,
        }

    def start_worker(self, concurrency: int, **env: str) -> subprocess.Popen[bytes]:
        """A real `python -m workers` process (its log in the benchmark's folder)."""
        n = len(self.procs.items)
        log = (self.root / f"worker-{n}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers", "--concurrency", str(concurrency)],
            env=self.child_env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        return self.procs.add(proc)

    def start_arq_worker(self, *args: str) -> subprocess.Popen[bytes]:
        """A bare arq worker process (bench.arq_worker) on this benchmark's Redis."""
        n = len(self.procs.items)
        log = (self.root / f"arq-worker-{n}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.arq_worker", "--port", str(self.port), *args],
            env=self.child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        return self.procs.add(proc)

    def tuning(self, cases: list[dict[str, Any]], **config: Any) -> Path:
        """A tuning folder with these cases; its file."""
        return write_tuning(self.root / "tuning", cases, **config)

    def client(self) -> TunefleetClient:
        return TunefleetClient(self.settings)

    async def register(self, tuning_file: Path) -> str:
        async with self.client() as client:
            return (await client.register(tuning_file)).name

    async def submit(self, tuning: str, cases: list[dict[str, Any]]) -> int:
        """Submit cases through the client, one after the other; how many were accepted."""
        accepted = 0
        async with self.client() as client:
            for item in cases:
                accepted += await client.submit(tuning, Case.model_validate(item))
        return accepted

    def events(self, tuning: str = "t1") -> list[dict[str, Any]]:
        return self.fleet.events(tuning)

    def results_done(self, tuning: str = "t1") -> int:
        """How many cases have a result.json (read from the store, no Redis command)."""
        return sum(1 for _ in (self.settings.store / "tunings" / tuning / "cases").glob("*/r*/result.json"))

    def wait_worker_ready(self, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
        """Until the worker announced itself (its presence key holds its pid)."""
        wait_for(lambda: self._announced(proc.pid), timeout_s, "the worker's presence", proc)

    def _announced(self, pid: int) -> bool:
        names = cast(list[bytes], self.stats.client.zrange("tf:workers", 0, -1))
        return any(n.decode().endswith(f":{pid}") for n in names)

    def _audit_records(self) -> list[dict[str, Any]]:
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line]

    def audit(self) -> list[dict[str, Any]]:
        """The git subprocesses the audit hook saw in this benchmark's processes."""
        return [r for r in self._audit_records() if "git" in r]

    def extractions(self, pids: Collection[int] | None = None) -> int:
        """The snapshot extractions the audit hook saw begin (in the processes `pids`, or in any)."""
        return sum(
            1 for r in self._audit_records() if "extraction" in r and (pids is None or r["pid"] in pids)
        )

    def fs_counts(self, pid: int) -> Counter[str]:
        """The filesystem operations of a process so far (with BENCH_AUDIT_FS=1; flushed every second)."""
        last: dict[str, int] = {}
        for record in self._audit_records():
            if record.get("pid") == pid and "fs" in record:
                last = record["fs"]
        return Counter(last)


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    interval_s: float = 0.02,
) -> float:
    """Poll until the predicate holds; the seconds it took."""
    began = time.monotonic()
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - began


def simple_cases(n: int, prefix: str = "c", **demo: Any) -> list[dict[str, Any]]:
    """Cases that pass their first try in both phases: run + analyze in nomem and in mem (4 steps)."""
    return [case(f"{prefix}{i:06d}", **demo) for i in range(n)]


def apply_cases(n: int, prefix: str = "a", **demo: Any) -> list[dict[str, Any]]:
    """Cases that need one apply (a rule of their own): 7 steps (run, analyze, apply, then 4 as above)."""
    return [case(f"{prefix}{i:06d}", rules=[f"rule-{prefix}{i:06d}"], **demo) for i in range(n)]


def zero_latency() -> dict[str, Any]:
    return demo_adapter(0, 0, 0)


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


def steps_of(events: list[dict[str, Any]]) -> Counter[str]:
    """Recorded steps (step_finished events) by step name."""
    return Counter(e["step"] for e in events if e["kind"] == "step_finished")


def event_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["at"])).timestamp()


def makespan(events: list[dict[str, Any]]) -> tuple[int, float]:
    """(steps recorded, seconds from the first step start to the last step end)."""
    starts = [event_time(e) for e in events if e["kind"] == "step_started"]
    ends = [event_time(e) for e in events if e["kind"] == "step_finished"]
    return len(ends), max(ends) - min(starts)


def versions_used(events: list[dict[str, Any]], tuning_root: Path) -> set[str]:
    """The system versions some step worked on: each run's (its `step_started` event), and each apply's
    base (its `apply.json`), whose private copy is made from that version's snapshot."""
    runs = {e["data"]["version"] for e in events if e["kind"] == "step_started" and e["step"] == "run"}
    bases = {
        json.loads(path.read_text())["base_version"] for path in tuning_root.glob("cases/*/r*/*/*/apply.json")
    }
    return runs | bases


def start_gaps(events: list[dict[str, Any]], step: str) -> list[float]:
    """Per case, seconds from a step's end to the start of the case's next `step` (the loop's own delay).
    A step ends at its start plus its `duration_ms`: its `step_finished` is sent once its record has
    landed, which may be after the next agent started."""
    started: dict[tuple[str, str, int, str], float] = {}
    ends: dict[str, list[float]] = {}
    starts: list[tuple[str, float]] = []
    for event in events:
        name = event.get("case")
        if name is None or event["kind"] not in ("step_started", "step_finished"):
            continue
        key = (name, event["phase"], event["attempt"], event["step"])
        if event["kind"] == "step_started":
            started[key] = event_time(event)
            if event["step"] == step:
                starts.append((name, started[key]))
        elif key in started and event.get("duration_ms") is not None:
            ends.setdefault(name, []).append(started[key] + event["duration_ms"] / 1000)
    gaps: list[float] = []
    for name, at in starts:
        before = [end for end in ends.get(name, []) if end <= at]
        if before:
            gaps.append(at - max(before))
    return gaps
