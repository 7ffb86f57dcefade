"""12. A system of many files: what the private copies that analyzers and appliers get cost the worker's
event loop, which every other job of the worker shares.

A version of FILES prose files (FOLDERS folders) is committed and its snapshot extracted; then COPIES
private copies of it are made at once, as that many cases' analyze steps would make them, while a
ticker task measures the event loop's longest stall (the longest time between two of its turns). The
fleet's `SystemRepo.private_copy` makes each copy in a thread (of the worker's folder threads,
`trees.folder_threads`: one per core); the baseline makes the same copies the
plain synchronous way (`shutil.copytree` on the loop, as the worker did before), in the same run. A
stalled loop delays every other job's heartbeat, events and step starts by as much.

    PYTHONPATH=. .venv/bin/python -m bench big_system
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Figure, discard, frozen_heap, run_async
from service.core.io.trees import folder_threads
from service.core.system import SystemRepo, copy_writable

NAME = "big_system"
FOLDERS = 30
FILES = 1500
COPIES = 20
TARGET_MS = 50.0
TICK_S = 0.001


def write_system(source: Path, files: int = FILES, folders: int = FOLDERS, lines: int = 50) -> None:
    """A system of `files` prose files of `lines` lines, spread over `folders` folders."""
    for f in range(folders):
        (source / f"skills-{f}").mkdir(parents=True)
        for n in range(files // folders):
            (source / f"skills-{f}" / f"skill-{n}.md").write_text(f"- rule: r{f}-{n}\n" * lines)


class StallMeter:
    """The event loop's longest stall while it runs: how late a 1 ms timer fires, at worst (a loop
    monitor that spins instead would fight the copying threads for the GIL and slow them down)."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._began = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            self._began = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self._late()

    def _late(self) -> None:
        self.longest_s = max(self.longest_s, time.perf_counter() - self._began - TICK_S)

    async def __aenter__(self) -> StallMeter:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self._late()  # the timer still pending is late by as much


async def _fleet(repo: SystemRepo, version: str, into: Path) -> tuple[float, float]:
    """(longest stall ms, wall s) of COPIES private copies made at once by the fleet's code."""
    began = time.perf_counter()
    async with StallMeter() as meter:
        await asyncio.gather(*(repo.private_copy(version, into / f"c{i}" / "system") for i in range(COPIES)))
    return meter.longest_s * 1000, time.perf_counter() - began


async def _synchronous(snapshot: Path, into: Path) -> tuple[float, float]:
    """The same copies made on the event loop (the same function, called there), one task each."""

    async def copy(i: int) -> None:
        await asyncio.sleep(0)
        copy_writable(snapshot, into / f"c{i}" / "system")

    began = time.perf_counter()
    async with StallMeter() as meter:
        await asyncio.gather(*(copy(i) for i in range(COPIES)))
    return meter.longest_s * 1000, time.perf_counter() - began


async def measure(root: Path) -> tuple[float, float, float, float]:
    asyncio.get_running_loop().set_default_executor(folder_threads())  # as a worker's loop has it
    source = root / "source"
    write_system(source)
    repo = SystemRepo(root / "system.git", root / "snapshots")
    version = await repo.init_from(source)
    snapshot = await repo.snapshot(version)
    fleet_ms, fleet_s = await _fleet(repo, version, root / "fleet")
    sync_ms, sync_s = await _synchronous(snapshot, root / "sync")
    return fleet_ms, fleet_s, sync_ms, sync_s


def run() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix=f"{NAME}-", dir=ROOT / "var" / "bench"))
    try:
        with frozen_heap():  # the loop measured is the harness's (as a worker's, its start is frozen)
            fleet_ms, fleet_s, sync_ms, sync_s = run_async(measure(root))
    finally:
        discard(root)
    return [
        Figure(
            NAME,
            f"event loop's longest stall, {COPIES} private copies of a {FILES:,}-file version at once",
            fleet_ms,
            "ms",
            sync_ms,
            "the same copies made on the loop",
            f"<= {TARGET_MS:g} ms",
            fleet_ms <= TARGET_MS,
            f"all copies made in {fleet_s:.2f} s (on the loop: {sync_s:.2f} s); the loop's longest stall is "
            "how long every other job of the worker (heartbeats, events, step starts) waits at worst",
        )
    ]
