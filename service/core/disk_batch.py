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
this shared machine.)

A write made alone, though, lands on the event loop itself: when no flush is under way, no other write
came in the same loop turn and the writes have been landing fast (`inline_below_ms`, their moving
average). The hop to a flush thread and back cost 2 to 3 ms of latency per record with four cases in
flight (its thread waits for the GIL, then the loop for the thread's answer), against 0.4 ms for the
write itself on a quiet disk: on the path of every step of a worker with few slots. The first write of a
burst lands on the loop and the rest of it in threads, and a slow disk sends them all to threads.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from service.core.files import write_atomic

FLUSH_THREADS = 32
INLINE_BELOW_MS = 2.0
"""A lone write lands on the event loop while the writes' moving average stays under this."""
AVERAGE_WEIGHT = 0.2
"""The weight of the latest write in that moving average."""


@dataclass
class _Write:
    path: Path
    data: bytes
    done: asyncio.Future[None]
    landed_s: float = 0.0
    """How long it took to land (set by its flush thread)."""


def _land(write: _Write) -> OSError | None:
    """Write one record whole and durably under its name (in a flush thread); the error, if it failed
    (no temp file is left then)."""
    began = time.perf_counter()
    try:
        write_atomic(write.path, write.data)
    except OSError as exc:
        return exc
    finally:
        write.landed_s = time.perf_counter() - began
    return None


def _land_in_order(writes: list[_Write]) -> dict[int, OSError | None]:
    return {id(write): _land(write) for write in writes}


class DiskBatch:
    """The durable writes of one process (or of one tuning in it), flushed in batches."""

    def __init__(self, inline_below_ms: float = INLINE_BELOW_MS) -> None:
        self._inline_below_ms = inline_below_ms
        self._average_ms = 0.0
        self._turn_taken = False
        self._queued: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None
        self._threads = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush")
        self.flushes = 0
        """Flushes made so far in threads (each of one batch of writes)."""
        self.inline = 0
        """Writes landed on the event loop so far."""

    def _alone(self) -> bool:
        """Whether a write now would be the only one: none flushing, none queued, none landed on the loop
        in this loop turn, and the disk fast of late."""
        return (
            self._flushing is None
            and not self._queued
            and not self._turn_taken
            and self._average_ms < self._inline_below_ms
        )

    def _landed(self, seconds: float) -> None:
        self._average_ms += AVERAGE_WEIGHT * (1000 * seconds - self._average_ms)

    def _turn_over(self) -> None:
        self._turn_taken = False

    def _land_here(self, path: Path, data: bytes) -> None:
        """Land one write on the event loop (a lone write: see the module's docstring)."""
        self._turn_taken = True
        asyncio.get_running_loop().call_soon(self._turn_over)
        self.inline += 1
        began = time.perf_counter()
        try:
            write_atomic(path, data)
        finally:
            self._landed(time.perf_counter() - began)

    def _flush(self, batch: list[_Write]) -> dict[int, OSError | None]:
        """Land the writes, several in parallel (run in a thread of its own); by write (its `id`), the
        error if it failed. Writes to one path land one after the other, in their order."""
        by_path: dict[Path, list[_Write]] = {}
        for write in batch:
            by_path.setdefault(write.path, []).append(write)
        errors: dict[int, OSError | None] = {}
        for landed in self._threads.map(_land_in_order, by_path.values()):
            errors.update(landed)
        return errors

    async def write(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` atomically and durably. The write lands even if the caller is cancelled
        meanwhile (as a synchronous write would have): the cancellation goes on once it has."""
        if self._alone():
            self._land_here(path, data)
            return
        write = _Write(path, data, asyncio.get_running_loop().create_future())
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
                if len(batch) == 1:  # straight to a flush thread (one thread hop, not two)
                    landing = asyncio.get_running_loop().run_in_executor(self._threads, _land_in_order, batch)
                else:
                    landing = asyncio.ensure_future(asyncio.to_thread(self._flush, batch))
                try:
                    errors = await asyncio.shield(landing)
                except asyncio.CancelledError:  # the loop is closing: the threads end the batch anyway
                    for write in batch:
                        if not write.done.done():
                            write.done.cancel()
                    raise
                for write in batch:
                    self._landed(write.landed_s)
                    error = errors[id(write)]
                    if write.done.done():
                        continue
                    if error is None:
                        write.done.set_result(None)
                    else:
                        write.done.set_exception(error)
        finally:
            self._flushing = None
