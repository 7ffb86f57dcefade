"""Running a body beside a watchdog task (a lease heartbeat, a lock renewer), blocking work in a thread
that a cancellation does not cut in two, and bookkeeping that may fail without stopping anything."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar

import structlog
from redis.exceptions import RedisError

from workers.errors import FilesBusy, LeaseLost

log = structlog.get_logger()
T = TypeVar("T")
P = ParamSpec("P")


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
        leaf = first_leaf(eg)
        raise leaf from leaf.__cause__  # its own cause kept (what a caller reads of it), the group hidden


async def whole_in_thread(threads: Executor, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`work(*args, **kwargs)` in one of `threads`, for work that may block (a lock another process
    holds): the event loop and the worker's other jobs go on meanwhile. A cancellation of the caller
    waits for the work to end (a thread cannot be stopped, and a write left running would race the
    next one), then goes on."""
    call = functools.partial(contextvars.copy_context().run, work, *args, **kwargs)
    done = asyncio.get_running_loop().run_in_executor(threads, call)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait({done})
        if not done.cancelled():
            done.exception()  # seen: the cancellation is what the caller gets
        raise


async def quietly(awaitable: Awaitable[T]) -> T | None:
    """The awaitable's result; None (logged) when Redis, the store or the lease failed it: for
    bookkeeping on the way out of a job (an event, a hand-back), which must not hide why the job ends."""
    try:
        return await awaitable
    except (RedisError, OSError, LeaseLost, FilesBusy) as exc:
        log.warning("bookkeeping_failed", error=str(exc))
        return None
