"""Lines that many tasks of one process append to the same file in one event-loop turn, written with
one `write` on the loop's next turn.

A worker's cases end their steps in bursts, and each event is a line in its tuning's `events.jsonl`:
a hundred cases each appending their line would open, write and close the file a hundred times, on the
event loop. `LineBatch` queues the lines appended during a turn and writes each file's lines together
(one O_APPEND write: whole lines, never interleaved with other writers'), in the order they were
appended, before the Redis calls made in the same turn are sent (service.core.io.batch: both wait for the
loop's next turn, and callbacks run in order). A caller awaits its line as before: when `append`
returns, the line is in the file; an OSError reaches every caller whose line was in that write. A line
whose caller is cancelled meanwhile is written all the same, as a synchronous write would have been.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from service.core.io.files import append_line


class LineBatch:
    """The lines one process appends to files, written together by loop turn."""

    def __init__(self, write: Callable[[Path, str], None] = append_line) -> None:
        self._write = write
        self._queued: dict[Path, list[tuple[str, asyncio.Future[None]]]] = {}

    async def append(self, path: Path, line: str) -> None:
        """Append one line (no newline needed) to `path`, with the other lines of this loop turn."""
        await self.queue(path, line)

    def queue(self, path: Path, line: str) -> asyncio.Future[None]:
        """`append` without waiting: the line is queued now, and written by the time the returned
        future is done."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._write_queued)
        self._queued.setdefault(path, []).append((line.rstrip("\n"), done))
        return done

    def _write_queued(self) -> None:
        queued, self._queued = self._queued, {}
        for path, lines in queued.items():
            try:
                self._write(path, "\n".join(line for line, _ in lines))
            except OSError as exc:
                for _, done in lines:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _, done in lines:
                    if not done.done():
                        done.set_result(None)
