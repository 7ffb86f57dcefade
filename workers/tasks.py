"""Running a body beside a watchdog task (a lease heartbeat, a lock renewer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def watched(watchdog: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run the body while `watchdog` runs beside it; if the watchdog raises, the body is cancelled
    and the watchdog's exception is raised here, plain (not in a group). Body exceptions pass plain too."""
    try:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(watchdog)
            try:
                yield
            finally:
                task.cancel()
    except BaseExceptionGroup as eg:
        raise first_leaf(eg) from None
