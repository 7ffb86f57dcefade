"""Loaded by the benchmarks' child processes (their PYTHONPATH starts with this folder): records every
git subprocess a worker starts and every snapshot extraction it begins (the `os.mkdir` of a staging
folder `snapshots/.<version>.<pid>.<n>`, service.core.system), so a benchmark can count extractions
and git calls per step without touching the product's code. With BENCH_AUDIT_FS=1 it also counts the
filesystem operations of the process (open, mkdir, rename, remove, copy...) and appends the totals
every second; with BENCH_AUDIT_FS=2, also per file name."""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from typing import Any

_path = os.environ.get("BENCH_AUDIT_LOG")
_FS = {
    "open",
    "os.mkdir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.chmod",
    "os.scandir",
    "os.listdir",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.rmtree",
    "tempfile.mkstemp",
}
_STAGING = re.compile(r"/snapshots/\.([0-9a-f]{40})\.\d+\.\d+$")

if _path:
    _out = open(_path, "a", buffering=1)  # noqa: SIM115 - kept open for the life of the process
    _counts: Counter[str] = Counter()
    _count_fs = os.environ.get("BENCH_AUDIT_FS") in ("1", "2")
    _by_name = os.environ.get("BENCH_AUDIT_FS") == "2"

    def _creates(event: str, args: tuple[Any, ...]) -> bool:
        """A call that may make a new inode: mkdir, or an open for writing that may create."""
        if event == "os.mkdir":
            return True
        if event != "open" or len(args) < 3:
            return False
        mode, flags = args[1], args[2]
        if isinstance(mode, str):
            return any(c in mode for c in "wax")
        return isinstance(flags, int) and bool(flags & os.O_CREAT)

    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if _count_fs and event in _FS:
            _counts[event] += 1
            if _creates(event, args):
                _counts["creates (files and folders)"] += 1
            if _by_name and args and isinstance(args[0], str | bytes | os.PathLike):
                name = os.path.basename(os.fsdecode(args[0]))
                _counts[f"{event} {name.split('.')[0] if name.startswith('.') else name}"] += 1
        if event == "os.mkdir" and args and isinstance(args[0], str | os.PathLike):
            staging = _STAGING.search(os.fspath(args[0]))
            if staging:
                _out.write(
                    json.dumps({"pid": os.getpid(), "at": time.time(), "extraction": staging[1]}) + "\n"
                )
        if event != "subprocess.Popen":
            return
        argv = [str(a) for a in (args[1] or [])]
        if argv and os.path.basename(argv[0]) == "git":
            sub = next((a for a in argv[1:] if not a.startswith("-")), "?")
            record = {"pid": os.getpid(), "at": time.time(), "git": sub, "argv": argv[1:6]}
            _out.write(json.dumps(record) + "\n")

    def _flush() -> None:
        while True:
            time.sleep(1.0)
            _out.write(json.dumps({"pid": os.getpid(), "at": time.time(), "fs": dict(_counts)}) + "\n")

    sys.addaudithook(_hook)
    if _count_fs:
        threading.Thread(target=_flush, daemon=True).start()

_cprofile = os.environ.get("BENCH_CPROFILE", "")
if _cprofile:  # SIGUSR1 starts a profile of the main thread's CPU time, SIGUSR2 writes it
    import cProfile
    import signal

    _profiler = cProfile.Profile(time.thread_time)  # the main thread's CPU time, not wall time

    def _start(signum: int, frame: Any) -> None:
        _profiler.clear()
        _profiler.enable()

    def _dump(signum: int, frame: Any) -> None:
        _profiler.disable()
        part = os.path.join(_cprofile, f"cprofile-{os.getpid()}.part")
        _profiler.dump_stats(part)
        os.rename(part, os.path.join(_cprofile, f"cprofile-{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _dump)

_tracemalloc = os.environ.get("BENCH_TRACEMALLOC", "")
if _tracemalloc and "workers" in sys.orig_argv[-3:]:
    # A worker's Python heap, traced (6 frames deep) from 20 s after its start (tracing its imports
    # would slow its start past the harness's wait), written every minute to BENCH_TRACEMALLOC as
    # `<pid>-<minute>.snap`: what the worker allocated since and still holds. Compare two with
    # `tracemalloc.Snapshot.load(...).compare_to(...)`.
    import tracemalloc

    def _snapshots() -> None:
        time.sleep(20)
        tracemalloc.start(6)
        for minute in range(1, 10_000):
            time.sleep(60)
            path = os.path.join(_tracemalloc, f"{os.getpid()}-{minute:03d}.snap")
            gc.collect()  # what a cycle held is no part of what the worker keeps
            tracemalloc.take_snapshot().dump(path + ".part")
            os.rename(path + ".part", path)

    threading.Thread(target=_snapshots, daemon=True).start()

_trim_s = float(os.environ.get("BENCH_MALLOC_TRIM_S", "0") or 0)
if _trim_s > 0 and "workers" in sys.orig_argv[-3:]:
    # A worker that hands glibc's free pages back to the kernel (`malloc_trim(0)`) every BENCH_MALLOC_TRIM_S
    # seconds: with it, a rise of RSS that the Python heap does not show is told apart as memory the
    # allocator kept (freed, not returned) or as memory still held.
    import ctypes
    import ctypes.util

    _libc = ctypes.CDLL(ctypes.util.find_library("c"))

    def _trim() -> None:
        while True:
            time.sleep(_trim_s)
            _libc.malloc_trim(0)

    threading.Thread(target=_trim, daemon=True).start()

_gc_log = os.environ.get("BENCH_GC_LOG", "")
if _gc_log and "workers" in sys.orig_argv[-3:]:
    # A worker's garbage collections, a line a minute in BENCH_GC_LOG/<pid>.gc: per generation, the
    # collections so far and the objects they found unreachable (cyclic garbage: memory held until then).
    def _gc_stats() -> None:
        for minute in range(1, 10_000):
            time.sleep(60)
            with open(os.path.join(_gc_log, f"{os.getpid()}.gc"), "a", encoding="utf-8") as out:
                line = {"minute": minute, "stats": gc.get_stats(), "counts": gc.get_count()}
                out.write(json.dumps(line) + "\n")

    threading.Thread(target=_gc_stats, daemon=True).start()
