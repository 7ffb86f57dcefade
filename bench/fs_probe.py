"""What creating a folder or a file costs on the machine's disk, beside the fleet's count of them per call.

The case loop keeps every step on disk (a step's folder, its log, its records: docs/architecture.md), so a
figure measured on two days can differ by the disk's state alone. On ext4 without a journal (these
machines), every inode created scans past the inodes of its block group freed in the last few minutes
(`recently_deleted`, seen with perf): on 6 December 2026 a folder cost 90 to 175 us in var/, 40 us
in /root and 6 us on tmpfs. The llm bench prints this probe beside its figures so that they can be read
against the machine they were measured on.

The probe deletes nothing (a deletion would slow the benches after it): its folders stay in the
benchmark's folder, which the harness moves to the trash.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROBES = 300
"""Folders made per probe, each with one file: enough for a stable mean, few enough to take < 0.2 s."""
TMPFS = Path("/dev/shm")


@dataclass(frozen=True)
class InodeCost:
    """Microseconds to create one folder and one empty file (each with its own inode)."""

    folder_us: float
    file_us: float

    def text(self) -> str:
        return f"a folder {self.folder_us:.0f} us, a file {self.file_us:.0f} us"


def inode_cost(parent: Path) -> InodeCost:
    """Mean cost of PROBES folders, then of a file in each, made in a new folder under `parent`."""
    root = Path(tempfile.mkdtemp(prefix="fs-probe-", dir=parent))
    folders = [root / f"d{i}" for i in range(PROBES)]
    began = time.perf_counter()
    for folder in folders:
        os.mkdir(folder)
    made = time.perf_counter()
    for folder in folders:
        os.close(os.open(folder / "f", os.O_CREAT | os.O_WRONLY, 0o600))
    ended = time.perf_counter()
    return InodeCost(1e6 * (made - began) / PROBES, 1e6 * (ended - made) / PROBES)


def tmpfs_cost() -> InodeCost | None:
    """The same on tmpfs (memory only: no block groups), for comparison; None where there is none. Its
    folders are removed: tmpfs has no inode scan for a deletion to slow."""
    if not TMPFS.is_dir() or not os.access(TMPFS, os.W_OK):
        return None
    with tempfile.TemporaryDirectory(prefix="tunefleet-fs-probe-", dir=TMPFS) as folder:
        return inode_cost(Path(folder))
