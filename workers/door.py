"""A door that tasks wait at: open at first, shut and opened again by whoever guards it.

The fleet's pause switch (workers.control) and the sandbox breaker (workers.breaker) each keep one:
run starts pass while it is open and wait at it while it is shut.
"""

from __future__ import annotations

import asyncio


class Door:
    """Open or shut; `wait_open` returns at once while open, else when it is next opened."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def is_shut(self) -> bool:
        return not self._open.is_set()

    def open(self) -> None:
        self._open.set()

    def shut(self) -> None:
        self._open.clear()

    async def wait_open(self) -> None:
        await self._open.wait()
