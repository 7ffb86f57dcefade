"""A process supervisor for the tests: keeps a number of worker processes running, starting a new one
whenever one dies (as systemd's `Restart=` or a Kubernetes Deployment would)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tests.support.fleet import Fleet

WATCH_S = 0.05
"""How often the supervisor looks for dead workers."""


class Supervisor:
    """`count` workers of `concurrency` slots each; `deaths` holds the exit code of each one that died."""

    def __init__(self, fleet: Fleet, count: int, concurrency: int) -> None:
        self.fleet = fleet
        self.concurrency = concurrency
        self.procs: list[subprocess.Popen[bytes]] = [fleet.start_worker(concurrency) for _ in range(count)]
        self.deaths: list[int] = []

    async def _watch(self) -> None:
        while True:
            for i, proc in enumerate(self.procs):
                code = proc.poll()
                if code is not None:
                    self.deaths.append(code)
                    self.procs[i] = self.fleet.start_worker(self.concurrency)
            await asyncio.sleep(WATCH_S)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Supervisor]:
        """Supervise until the block ends (the fleet's teardown kills the workers)."""
        task = asyncio.create_task(self._watch())
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
