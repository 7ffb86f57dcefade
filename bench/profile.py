"""Sampling profiles of a benchmark's worker process with py-spy, when BENCH_PROFILE is set.

BENCH_PROFILE=cpu python -m bench overhead   # var/bench/profiles/<bench>-<pid>.txt: collapsed stacks (CPU)
BENCH_PROFILE=wall python -m bench overhead  # the same with idle samples, per thread (where the time goes)
BENCH_PROFILE=threads python -m bench overhead  # CPU samples, per thread (the event loop apart)
BENCH_PROFILE=perf python -m bench overhead  # <bench>-<pid>.perf.data: `perf record -g`, kernel time included
                                             # (read it with `perf report -i FILE --no-children --sort sym`)
BENCH_PROFILE=syscalls python -m bench slots # <bench>-<pid>.strace: `strace -c -f`, the worker's system
                                             # calls by count and time, its threads included
BENCH_PROFILE=cprofile python -m bench llm   # <bench>-<pid>.prof: cProfile of the worker's main thread, timed
                                             # by its own CPU time (time.thread_time), so other sessions' load
                                             # does not enter it; read it with `python -m pstats FILE`
python -m bench.profile FILE [N]           # the N functions with the most samples, inclusive and self
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Self

from bench.common import PROFILES

_LINE = re.compile(r" \(([^)]*?)(?::\d+)?\)$")


class Profiler:
    """py-spy recording one process while the `with` body runs; does nothing unless BENCH_PROFILE is set.
    `wall` includes idle samples: a blocking fsync is idle to the CPU but not to the event loop."""

    def __init__(self, bench: str, pid: int, rate: int = 500) -> None:
        self.path = PROFILES / f"{bench}-{pid}.txt"
        self._bench = bench
        self._pid = pid
        self._rate = rate
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        mode = os.environ.get("BENCH_PROFILE", "")
        if mode == "cprofile":  # the worker's hook (bench/hooks/sitecustomize.py) starts on SIGUSR1
            PROFILES.mkdir(parents=True, exist_ok=True)
            self.path = PROFILES / f"{self._bench}-{self._pid}.prof"
            os.kill(self._pid, signal.SIGUSR1)
        elif mode == "perf" and shutil.which("perf"):
            PROFILES.mkdir(parents=True, exist_ok=True)
            self.path = self.path.with_suffix(".perf.data")
            self._proc = subprocess.Popen(
                ["perf", "record", "-g", "-F", str(self._rate), "-p", str(self._pid), "-o", str(self.path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        elif mode == "syscalls" and shutil.which("strace"):
            PROFILES.mkdir(parents=True, exist_ok=True)
            self.path = self.path.with_suffix(".strace")
            self._proc = subprocess.Popen(
                ["strace", "-c", "-f", "-p", str(self._pid), "-o", str(self.path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        elif mode in ("cpu", "wall", "threads") and Path(spy).exists():
            PROFILES.mkdir(parents=True, exist_ok=True)
            per_thread = {"wall": ["--idle", "--threads"], "threads": ["--threads"]}.get(mode, [])
            argv = [spy, "record", "-p", str(self._pid), "-r", str(self._rate), "-f", "raw", "--nonblocking"]
            self._proc = subprocess.Popen(
                [*argv, *per_thread, "-o", str(self.path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if os.environ.get("BENCH_PROFILE") == "cprofile":  # the hook writes the profile on SIGUSR2
            written = PROFILES / f"cprofile-{self._pid}.prof"
            os.kill(self._pid, signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not written.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            if written.exists():
                written.replace(self.path)
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            self._proc.wait(timeout=30)


def _frame(raw: str) -> str:
    """`func (path/file.py:12)` -> `func (file.py)`, so a function's lines add up."""
    match = _LINE.search(raw)
    if match is None:
        return raw
    where = match.group(1)
    short = "/".join(where.split("/")[-2:])
    return raw[: match.start()] + f" ({short})"


def summarize(path: Path, top: int = 25) -> str:
    inclusive: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")]
        total += count
        self_[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    out = [f"{path.name}: {total} samples"]
    out.append("inclusive:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    out.append("self:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in self_.most_common(top)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
