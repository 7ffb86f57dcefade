"""Durable writes that many tasks of one process make at about the same time, flushed to disk together
(a group commit).

A worker's cases end their steps in bursts, and each writes a record that must be on disk before the
case goes on. Flushing each one (`fsync`) on the event loop held the loop for the disk's latency,
once per record: on a busy disk, a hundred records cost a hundred flushes one after the other
(0.15 s to 0.4 s measured here), while the other cases waited. `DiskBatch` writes each record to a
temp file beside its path at once (no flush), flushes the records of a burst off the event loop, in
parallel (`FLUSH_THREADS` at a time: 8 to 21 ms for a hundred here, 15 to 48 ms eight at a time),
and only then gives each its name. So the guarantee is `files.write_atomic`'s: when a write returns,
the file is whole and durable under its name; a crash before leaves the old file. Writes that
arrive while a flush is under way go in the next one. (`syncfs`, one flush of the whole filesystem,
was as fast on a quiet disk but also flushes what other processes wrote: up to 0.1 s per burst on
this shared machine.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from service.core.files import fsync_file, temp_beside

FLUSH_THREADS = 32


@dataclass(frozen=True)
class _Write:
    tmp: str
    path: Path
    done: asyncio.Future[None]


class DiskBatch:
    """The durable writes of one process (or of one tuning in it), flushed in batches."""

    def __init__(self) -> None:
        self._queued: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None
        self._threads = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush")
        self.flushes = 0
        """Flushes made so far (each of one batch of writes)."""

    def _flush(self, temps: list[str]) -> None:
        """Make the temp files durable, several in parallel (run in a thread of its own)."""
        if len(temps) == 1:
            fsync_file(temps[0])
        else:
            list(self._threads.map(fsync_file, temps))

    async def write(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` atomically and durably. The write lands even if the caller is cancelled
        meanwhile (as a synchronous write would have): the cancellation goes on once it has."""
        write = _Write(temp_beside(path, data), path, asyncio.get_running_loop().create_future())
        self._queued.append(write)
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush_queued())
        try:
            await asyncio.shield(write.done)
        except asyncio.CancelledError:
            if not write.done.done():
                await asyncio.wait([write.done])
            if not write.done.cancelled():
                write.done.exception()  # seen: the cancellation is what the caller gets
            raise

    async def _flush_queued(self) -> None:
        """Flush what is queued, batch after batch, until nothing is (the first batch holds every write
        made in the loop turn that started this task)."""
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                self.flushes += 1
                try:
                    await asyncio.shield(asyncio.to_thread(self._flush, [w.tmp for w in batch]))
                except asyncio.CancelledError:
                    _fail(batch, None)
                    raise
                except OSError as exc:
                    _fail(batch, exc)
                    continue
                for write in batch:
                    try:
                        os.replace(write.tmp, write.path)
                    except OSError as exc:
                        _fail([write], exc)
                    else:
                        write.done.set_result(None)
        finally:
            self._flushing = None


def _fail(writes: list[_Write], exc: OSError | None) -> None:
    """Drop the temp files of writes that did not land; their callers get `exc` (None: cancelled)."""
    for write in writes:
        with contextlib.suppress(OSError):
            os.unlink(write.tmp)
        if write.done.done():
            continue
        if exc is None:
            write.done.cancel()
        else:
            write.done.set_exception(exc)
