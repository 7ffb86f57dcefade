"""Durable writes that many tasks of one process make at about the same time, flushed to disk together
(a group commit) by a writer process.

A worker's cases end their steps in bursts, and each writes a record that must be on disk before the
case goes on. Flushing each one (`fsync`) on the event loop held the loop for the disk's latency,
once per record: on a busy disk, a hundred records cost a hundred flushes one after the other
(0.15 s to 0.4 s measured here), while the other cases waited. `DiskBatch` sends the records of a
burst to its writer process (`service.core.io.durable`), whose threads write each one to a temp file
beside its path, flush it and only then give it its name: the event loop makes no file at all
(creating a file costs more than writing it on this disk: a scan of the inodes freed in the last 30 s,
see docs/benchmarks.md), so the other cases' steps go on meanwhile. The guarantee is `write_atomic`'s:
when a write returns, the file is whole and durable under its name; a crash before leaves the old
file. Writes that arrive while a batch is under way go in the next one. A record may come with files
for people beside it (`also`: an analysis's report): they are written first, atomically but not
flushed, then the record, so the record never stands without them.

Why a process and not threads of the worker: those threads wait for the GIL after every system call
while the event loop has work (see `service.core.io.durable`), so a record of 0.6 ms would land several
milliseconds after it was handed over (`bench landing`). A writer process has its own GIL.

The writer lives as long as its `DiskBatch` (`aclose` ends it; so does the end of its parent, however it
ends: it leaves when its socket closes). Should it die, the batch under way is sent again to a new one
(each write is atomic and names one file: landing it twice lands the same file); `WRITER_STARTS`
writers in a row dying on the same batch fail its writes with an OSError.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from service.core.io import durable

log = structlog.get_logger()

WRITER_STARTS = 3
"""Writer processes started in a row for one batch before its writes fail."""

WRITER_EXIT_S = 10.0
"""How long `aclose` waits for the writer to land what it holds and leave before it is killed."""


@dataclass(frozen=True)
class _Write:
    path: Path
    data: bytes
    done: asyncio.Future[None]
    also: tuple[tuple[Path, bytes], ...] = ()
    """Files written before the record, atomically and not flushed."""

    def request(self) -> durable.Request:
        return (str(self.path), self.data, tuple((str(path), data) for path, data in self.also))


class _Writer:
    """A writer process and the socket it answers on."""

    def __init__(
        self, process: asyncio.subprocess.Process, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.process = process
        self._reader = reader
        self._writer = writer

    @classmethod
    async def start(cls) -> _Writer:
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-I", "-S", durable.__file__, str(theirs.fileno())),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                env={},  # it needs none, and the worker's holds its secrets
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        except BaseException:
            ours.close()
            process.kill()
            await process.wait()
            raise
        log.debug("disk_writer_started", pid=process.pid)
        return cls(process, reader, writer)

    async def land(self, batch: list[durable.Request]) -> list[durable.Failure | None]:
        """The writer's answer to one batch; ConnectionError or IncompleteReadError when it is gone."""
        self._writer.write(durable.frame(batch))
        (size,) = durable.HEADER.unpack(await self._reader.readexactly(durable.HEADER.size))
        answers: list[durable.Failure | None] = marshal.loads(await self._reader.readexactly(size))
        return answers

    async def aclose(self) -> None:
        """Close the socket: the writer lands what it was sent and leaves; wait for that (bounded)."""
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
        try:
            await asyncio.wait_for(self.process.wait(), WRITER_EXIT_S)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


class DiskBatch:
    """The durable writes of one process, flushed in batches by its writer process."""

    def __init__(self) -> None:
        self._queued: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None
        self._writer: _Writer | None = None
        self.flushes = 0
        """Batches landed so far."""
        self.writers_started = 0
        """Writer processes started so far (more than one: a writer died and was replaced)."""

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid, once started."""
        return None if self._writer is None else self._writer.process.pid

    async def start(self) -> None:
        """Start the writer now rather than at the first write (a worker does, so that its first burst
        does not wait for the writer's start)."""
        if self._writer is None:
            self._writer = await _Writer.start()
            self.writers_started += 1

    async def __aenter__(self) -> DiskBatch:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Land what is queued, then end the writer."""
        while self._flushing is not None:
            await asyncio.wait([self._flushing])
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await writer.aclose()

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

    async def _land(self, batch: list[durable.Request]) -> list[durable.Failure | None]:
        """The writer's answers to a batch, the batch sent again to a new writer should one die on it."""
        for _ in range(WRITER_STARTS):
            await self.start()
            assert self._writer is not None
            try:
                return await self._writer.land(batch)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                lost, self._writer = self._writer, None
                log.warning("disk_writer_lost", pid=lost.process.pid, error=repr(exc), writes=len(batch))
                await lost.aclose()
        raise OSError(f"{WRITER_STARTS} disk writer processes in a row ended before landing a batch")

    async def _flush_queued(self) -> None:
        """Land what is queued, batch after batch, until nothing is (the first batch holds every write
        made in the loop turn that started this task)."""
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                self.flushes += 1
                landing = asyncio.ensure_future(self._land([write.request() for write in batch]))
                try:
                    answers = await asyncio.shield(landing)
                    failures = [None if answer is None else OSError(*answer) for answer in answers]
                except OSError as exc:  # no writer could land the batch: each of its writes failed
                    failures = [exc] * len(batch)
                except asyncio.CancelledError:  # the loop is closing: the writer ends the batch anyway
                    for write in batch:
                        if not write.done.done():
                            write.done.cancel()
                    raise
                for write, failure in zip(batch, failures, strict=True):
                    if write.done.done():
                        continue
                    if failure is None:
                        write.done.set_result(None)
                    else:
                        write.done.set_exception(failure)
        finally:
            self._flushing = None
