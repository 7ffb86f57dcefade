"""Work on whole folders (copies, removals, digests, walks) sized to the folder: on the event loop when
the folder is small, in a thread when it is not.

A step copies and removes folders whose size the user or an agent decides: the system (a private copy
for an agent analyzer and for each applier), a run's memory, a step's old folder. On the event loop a
folder of 1,500 files holds every other job of the worker for 0.2 to 0.6 s (no heartbeat, no event, no
step start; `bench big_system`). In a thread it costs the loop nothing, but a trip to a thread is
not free on a busy worker: the thread and the loop take the GIL from each other at every system call,
and handing the demo's few-file memories to threads raised the worker's CPU per step by about
two fifths (`bench overhead`). So a folder of fewer than SMALL_ENTRIES entries, a few
milliseconds of work at most, is handled where the caller is.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

SMALL_ENTRIES = 100
"""Files, folders and links below a folder under which its work is done on the event loop."""


def folder_threads() -> ThreadPoolExecutor:
    """The threads a worker's folder work runs in (its event loop's default executor: `off_loop`, the
    snapshots' extraction, the folders lent to an agent's user): one per core it may run on. The work is
    Python walking files, so it holds the GIL between its system calls: asyncio's default of cores + 4
    threads only made more of them wait for the GIL and the cores, the event loop among them.
    `bench big_system` (20 copies of a 1,500-file version at once, 2 cores): the loop's longest stall
    29 to 49 ms and the copies 6.3 to 6.6 s with the default's 6 threads, 10 to 13 ms and 3.4 to 4.6 s
    with 2."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux: the cores this process may run on
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 2)
    return ThreadPoolExecutor(max(2, cores), thread_name_prefix="folders")


def _entries(root: Path, strict: bool = False) -> Iterator[os.DirEntry[str]]:
    """The files, folders and links below `root`, links not followed, each folder before what it holds
    (none when it is no folder; a folder that cannot be read is passed over, or with `strict` raises
    OSError)."""
    pending = [os.fspath(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    yield entry
        except OSError:
            if strict:
                raise


def entries_below(root: Path, limit: int = SMALL_ENTRIES) -> int:
    """How many files, folders and links are below `root` (links not followed), counted up to `limit`;
    0 when it is no folder."""
    count = 0
    for _ in _entries(root):
        count += 1
        if count >= limit:
            break
    return count


@dataclass(frozen=True)
class FolderSize:
    """What a folder holds, counted until a bound was passed."""

    entries: int
    """Files, folders and links below it (links not followed)."""
    size_bytes: int
    """The sizes of its files and links."""
    over: bool
    """Whether a bound was passed (the counts then stop there)."""


def folder_size(root: Path, max_entries: int, max_bytes: int) -> FolderSize:
    """The entries and bytes below `root` (nothing when it is no folder), counted only until one of them
    passes its bound: a folder of a million files costs `max_entries` entries, not a million."""
    entries = size_bytes = 0
    for entry in _entries(root):
        entries += 1
        if not entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):  # gone meanwhile: it holds nothing
                size_bytes += entry.stat(follow_symlinks=False).st_size
        if entries > max_entries or size_bytes > max_bytes:
            return FolderSize(entries, size_bytes, over=True)
    return FolderSize(entries, size_bytes, over=False)


def is_large(root: Path) -> bool:
    """Whether the work on the folder `root` goes to a thread: SMALL_ENTRIES entries or more."""
    return entries_below(root) >= SMALL_ENTRIES


def clear(path: Path) -> None:
    """Remove whatever is at `path` here and now: a link itself (never what it points at), a file, or a
    folder with its content; nothing when there is nothing."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


async def off_loop(large: bool, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`work(*args, **kwargs)`: in a thread when `large`, else here, on the event loop."""
    if large:
        return await asyncio.to_thread(work, *args, **kwargs)
    return work(*args, **kwargs)


async def on_folder(root: Path, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`work(*args, **kwargs)`, whose cost grows with the folder `root`: in a thread when `root` holds
    SMALL_ENTRIES entries or more, else on the event loop."""
    return await off_loop(is_large(root), work, *args, **kwargs)


async def remove_tree(path: Path) -> None:
    """Remove `path` and everything below it, errors ignored (nothing when it is not there)."""
    if os.path.lexists(path):
        await on_folder(path, shutil.rmtree, path, ignore_errors=True)


async def copy_tree(source: Path, dest: Path, plain: bool = False) -> None:
    """Copy the folder `source` to `dest` (which must not exist; its missing parents are made), links kept
    as links; `plain` copies file contents only (no modes, no times): a small folder is then copied here
    in one walk (`copy_listed`), with none of `shutil.copytree`'s second walk and attribute copies (0.28
    against 0.17 ms for a memory run's one-file memory)."""
    if not plain:
        await on_folder(source, shutil.copytree, source, dest, symlinks=True, copy_function=shutil.copy2)
        return
    listed = small_listing(source)
    if listed is None:
        await asyncio.to_thread(shutil.copytree, source, dest, symlinks=True, copy_function=shutil.copyfile)
    else:
        copy_listed(source, dest, listed)


def small_listing(root: Path) -> list[os.DirEntry[str]] | None:
    """The files, folders and links below the folder `root` (links not followed), each folder before what
    it holds; None when they are SMALL_ENTRIES or more. A folder that cannot be read raises OSError."""
    listed = list(itertools.islice(_entries(root, strict=True), SMALL_ENTRIES))
    return None if len(listed) >= SMALL_ENTRIES else listed


def copy_listed(source: Path, dest: Path, listed: list[os.DirEntry[str]]) -> None:
    """Make `dest` (and its missing parents) a copy of the folder `source`, whose entries are `listed`
    (`small_listing`): folders made afresh, file contents copied, links copied as links."""
    os.makedirs(dest)
    start, base = len(os.fspath(source)), os.fspath(dest)
    for entry in listed:
        target = base + entry.path[start:]
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            os.mkdir(target)
        else:
            shutil.copyfile(entry.path, target, follow_symlinks=False)
