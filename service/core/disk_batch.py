"""Durable writes that many tasks of one process make at about the same time, flushed to disk together
(a group commit).

A worker's cases end their steps in bursts, and each writes a record that must be on disk before the
case goes on. Flushing each one (`fsync`) on the event loop held the loop for the disk's latency,
once per record: on a busy disk, a hundred records cost a hundred flushes one after the other
(0.15 s to 0.4 s measured here), while the other cases waited. `DiskBatch` hands the records of a
burst to threads (`FLUSH_THREADS` at a time: 8 to 21 ms for a hundred here, 15 to 48 ms eight at a
time), each of which writes one record to a temp file beside its path, flushes it and only then gives
it its name: the event loop makes no file at all (creating a file costs more than writing it on this
disk: a scan of the inodes freed in the last 30 s, see docs/benchmarks.md), so the other cases' steps
go on meanwhile. So the guarantee is `files.write_atomic`'s: when a write returns, the file is whole
and durable under its name; a crash before leaves the old file. Writes that arrive while a flush is
under way go in the next one. (`syncfs`, one flush of the whole filesystem,
was as fast on a quiet disk but also flushes what other processes wrote: up to 0.1 s per burst on
this shared machine.) A record may come with files for people beside it (`also`: an analysis's
report): the same thread writes them first, atomically but not flushed, then the record, so the
record never stands without them and the event loop makes none of them either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from service.core.files import write_atomic

FLUSH_THREADS = 32


@dataclass(frozen=True)
class _Write:
    path: Path
    data: bytes
    done: asyncio.Future[None]
    also: tuple[tuple[Path, bytes], ...] = ()
    """Files written before the record, atomically and not flushed."""


def _land(write: _Write) -> OSError | None:
    """Write one record whole and durably under its name, its `also` files first (in a flush thread); the
    error, if one failed (no temp file is left then, and the record is not written after a failed one)."""
    try:
        for path, data in write.also:
            write_atomic(path, data, durable=False)
        write_atomic(write.path, write.data)
    except OSError as exc:
        return exc
    return None


def _land_in_order(writes: list[_Write]) -> dict[int, OSError | None]:
    return {id(write): _land(write) for write in writes}


class DiskBatch:
    """The durable writes of one process (or of one tuning in it), flushed in batches."""

    def __init__(self) -> None:
        self._queued: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None
        self._threads = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush")
        self.flushes = 0
        """Flushes made so far (each of one batch of writes)."""

    def _flush(self, batch: list[_Write]) -> dict[int, OSError | None]:
        """Land the writes, several in parallel (run in one of the flush threads, which hands them to the
        others: at most one batch is flushed at a time, so one of FLUSH_THREADS waits here and the rest
        write; not in the loop's default executor, whose threads the worker's folder work may all hold);
        by write (its `id`), the error if it failed. Writes to one path land one after the other, in their
        order."""
        by_path: dict[Path, list[_Write]] = {}
        for write in batch:
            by_path.setdefault(write.path, []).append(write)
        errors: dict[int, OSError | None] = {}
        for landed in self._threads.map(_land_in_order, by_path.values()):
            errors.update(landed)
        return errors

    async def write(self, path: Path, data: bytes, also: Sequence[tuple[Path, bytes]] = ()) -> None:
        """Write `data` to `path` atomically and durably, after the `also` files (atomically, not flushed).
        The write lands even if the caller is cancelled meanwhile (as a synchronous write would have): the
        cancellation goes on once it has."""
        write = _Write(path, data, asyncio.get_running_loop().create_future(), tuple(also))
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
        loop = asyncio.get_running_loop()
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                self.flushes += 1
                if len(batch) == 1:  # straight to a flush thread (one thread hop, not two)
                    landing = loop.run_in_executor(self._threads, _land_in_order, batch)
                else:
                    landing = loop.run_in_executor(self._threads, self._flush, batch)
                try:
                    errors = await asyncio.shield(landing)
                except asyncio.CancelledError:  # the loop is closing: the threads end the batch anyway
                    for write in batch:
                        if not write.done.done():
                            write.done.cancel()
                    raise
                for write in batch:
                    error = errors[id(write)]
                    if write.done.done():
                        continue
                    if error is None:
                        write.done.set_result(None)
                    else:
                        write.done.set_exception(error)
        finally:
            self._flushing = None
