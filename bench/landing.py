"""17. A record's landing under a busy event loop: how long a durable write (`DiskBatch.write`, which a
worker's writer process lands) takes while the loop always has work ready, against the same write made
by a thread of the process (`write_atomic` through `run_in_executor`, as the worker did before 6
December).

A worker's loop with many cases rarely idles. A thread of the same process gets the GIL back after each
system call of its write only when the loop lets it go for long enough: CPython 3.11 forces a switch
for a waiting thread only after a whole switch interval without one, and a loop with callbacks ready
lets the GIL go and takes it back at every turn (docs/benchmarks.md, "Where a target is missed"). The
busy loop here is one task that computes for BUSY_S and yields, again and again; WRITES records of
RECORD_BYTES are written one after the other, GAP_S apart, by each side, then again with the loop idle.

    PYTHONPATH=. .venv/bin/python -m bench landing
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import ROOT, Figure, discard, frozen_heap, median, percentile, run_async
from service.core.io.disk_batch import DiskBatch
from service.core.io.durable import FLUSH_THREADS, write_atomic

NAME = "landing"
WRITES = 30
RECORD_BYTES = 2_000
GAP_S = 0.01
BUSY_S = 0.0002
MEDIAN_TARGET_MS = 5.0
WORST_TARGET_MS = 50.0

Write = Callable[[Path, bytes], Awaitable[None]]


async def _busy(stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        while time.perf_counter() - began < BUSY_S:
            pass
        await asyncio.sleep(0)


async def _landings(write: Write, folder: Path, busy: bool) -> list[float]:
    """The landing times (ms) of WRITES records, the loop kept busy meanwhile or not."""
    stop = asyncio.Event()
    busy_task = asyncio.create_task(_busy(stop)) if busy else None
    times = []
    try:
        for i in range(WRITES):
            began = time.perf_counter()
            await write(folder / f"c{i}" / "run.json", b"x" * RECORD_BYTES)
            times.append((time.perf_counter() - began) * 1000)
            await asyncio.sleep(GAP_S)
    finally:
        stop.set()
        if busy_task is not None:
            await busy_task
    return times


async def measure(root: Path) -> dict[tuple[str, bool], list[float]]:
    threads = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush")
    loop = asyncio.get_running_loop()

    async def in_thread(path: Path, data: bytes) -> None:
        await loop.run_in_executor(threads, write_atomic, path, data)

    found: dict[tuple[str, bool], list[float]] = {}
    try:
        async with DiskBatch() as disk:
            await disk.write(root / "started.json", b"{}\n")  # the writer is past its start, as a worker's
            for busy in (True, False):
                found["writer", busy] = await _landings(disk.write, root / f"writer-{busy}", busy)
                found["thread", busy] = await _landings(in_thread, root / f"thread-{busy}", busy)
    finally:
        threads.shutdown()
    return found


def run() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix=f"{NAME}-", dir=ROOT / "var" / "bench"))
    try:
        with frozen_heap():
            found = run_async(measure(root))
    finally:
        discard(root)
    writer, thread = found["writer", True], found["thread", True]
    idle = (
        f"with the loop idle: {median(found['writer', False]):.2f} ms median for the writer, "
        f"{median(found['thread', False]):.2f} ms for a thread"
    )
    setup = (
        f"{WRITES} records of {RECORD_BYTES:,} bytes, {GAP_S * 1000:g} ms apart, "
        f"the loop busy in {BUSY_S * 1e3:g} ms slices"
    )
    p90 = f"p90 {percentile(writer, 90):.2f} ms (a thread: {percentile(thread, 90):.2f} ms)"
    return [
        Figure(
            NAME,
            "a record's landing under a busy event loop, median",
            median(writer),
            "ms",
            median(thread),
            "the same write by a thread of the process",
            f"<= {MEDIAN_TARGET_MS:g} ms",
            median(writer) <= MEDIAN_TARGET_MS,
            f"{setup}; {p90}; {idle}",
        ),
        Figure(
            NAME,
            "a record's landing under a busy event loop, worst",
            max(writer),
            "ms",
            max(thread),
            "the same write by a thread of the process",
            f"<= {WORST_TARGET_MS:g} ms",
            max(writer) <= WORST_TARGET_MS,
            setup,
        ),
    ]
