"""Atomic, durable file writes: in this process (`write_atomic`), or in a writer process of its own
(`serve`, which `service.core.io.disk_batch.DiskBatch` starts as `python -I -S durable.py <socket fd>`).

Why a process. A write made by a thread of a busy asyncio process waits for the GIL after each of its
system calls (open, write, fsync, close, rename): CPython 3.11 hands the GIL to a waiting thread only
after a whole switch interval without a switch, and an event loop with callbacks ready lets it go and
takes it back at once at every turn. A record's 0.6 ms of flushing was seen done 3.4 to 3.9 ms after
it was handed over, and seconds later under a loop that never idled (docs/benchmarks.md). A writer
process has a GIL of its own: the event loop sends it a batch of writes over a socket and reads one
answer per batch.

This module imports the standard library only, so that the writer starts in about 50 ms (`-I -S`: no
site-packages, no environment, no script folder on `sys.path`).

The frames between the two: a 4-byte big-endian length, then a `marshal`ed value (only tuples,
lists, str, bytes, int and None: no code objects are sent or accepted).
- request: a list of `(path, data, also)`, `also` a tuple of `(path, data)` written before the
  record, atomically and without a flush;
- answer: one entry per request, in order: None (landed) or `(errno, strerror, filename)` (the record was not
  written; no temp file is left).
"""

from __future__ import annotations

import marshal
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FLUSH_THREADS = 32
"""Writes of one batch landed at once (each one mostly waits for the disk)."""

HEADER = struct.Struct("!I")

Also = tuple[tuple[str, bytes], ...]
Request = tuple[str, bytes, Also]
Failure = tuple[int, str, str]
"""An OSError as it crosses to the other process: (errno, strerror, the file it was about: the record or
one of its `also` files)."""


def create_temp(path: Path) -> tuple[int, str]:
    """An exclusive temp file beside `path` (its folder made on first use)."""
    tmp = f"{path.parent}/.{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(tmp, flags, 0o644), tmp
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(tmp, flags, 0o644), tmp


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part.
    `durable` also flushes it to disk first (records); inputs that are made again on a re-run skip it."""
    fd, tmp = create_temp(path)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def land(request: Request) -> Failure | None:
    """One record whole and durable under its name, its `also` files first; the failure, if one of them
    could not be written (the record is not written after a failed one)."""
    path, data, also = request
    writing = path
    try:
        for writing, text in also:
            write_atomic(Path(writing), text, durable=False)
        writing = path
        write_atomic(Path(path), data)
    except OSError as exc:  # named after the file being written (not its temp file)
        return (exc.errno or 0, exc.strerror or str(exc), writing)
    return None


def _land_in_order(requests: list[Request]) -> list[Failure | None]:
    return [land(request) for request in requests]


def land_batch(batch: list[Request], threads: ThreadPoolExecutor) -> list[Failure | None]:
    """Land a batch, its writes in parallel but those to one path one after the other, in their order;
    the answers in the batch's order."""
    if len(batch) == 1:
        return [land(batch[0])]
    by_path: dict[str, list[int]] = {}
    for index, (path, _, _) in enumerate(batch):
        by_path.setdefault(path, []).append(index)
    answers: list[Failure | None] = [None] * len(batch)
    groups = list(by_path.values())
    landed = threads.map(_land_in_order, ([batch[i] for i in group] for group in groups))
    for group, failures in zip(groups, landed, strict=True):
        for index, failure in zip(group, failures, strict=True):
            answers[index] = failure
    return answers


def frame(value: Iterable[object]) -> bytes:
    body = marshal.dumps(list(value))
    return HEADER.pack(len(body)) + body


def serve(fd: int) -> None:
    """The writer process: land each batch the socket `fd` brings and answer it, until the other end
    closes (its process ended, however it ended). Interrupts and terminations sent to the whole process
    group are the parent's to act on: the writer lands what it is given until the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = socket.socket(fileno=fd)
    stream = conn.makefile("rb")
    with ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush") as threads:
        while True:
            header = stream.read(HEADER.size)
            if len(header) < HEADER.size:
                return
            (size,) = HEADER.unpack(header)
            batch = marshal.loads(stream.read(size))
            conn.sendall(frame(land_batch(batch, threads)))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
