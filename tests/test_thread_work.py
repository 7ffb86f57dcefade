"""Blocking work in a thread of its own pool (workers.tasks.whole_in_thread): a waiting goal's lock does
not hold the event loop, and a cancelled caller is told only once the work has ended."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import structlog

from workers.tasks import whole_in_thread

LOOP_TURNS = 20


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_loop_runs_other_tasks_while_the_work_blocks_and_the_result_comes_back() -> None:
    """While the work blocks in its thread, other tasks of the loop run to their end; then the work's
    result (computed in the thread, with the caller's log context) is the caller's."""
    release = threading.Event()
    structlog.contextvars.bind_contextvars(goal="g1")

    def work() -> str:
        release.wait(10)
        return (
            f"done for {structlog.contextvars.get_contextvars()['goal']} in {threading.current_thread().name}"
        )

    with ThreadPoolExecutor(1, thread_name_prefix="lock-wait") as threads:
        call = asyncio.create_task(whole_in_thread(threads, work))
        other = asyncio.create_task(_turns(LOOP_TURNS))
        await other
        assert not call.done()
        release.set()
        assert await call == "done for g1 in lock-wait_0"
    structlog.contextvars.clear_contextvars()


async def test_a_cancelled_caller_gets_its_cancellation_only_once_the_work_has_ended() -> None:
    """A thread cannot be stopped: the caller, cancelled while its work runs, stays waiting for it (so a
    write left running never races the next one) and gets CancelledError once it has ended."""
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []

    def work() -> None:
        started.set()
        release.wait(10)
        ended.append("written")

    with ThreadPoolExecutor(1) as threads:
        call = asyncio.create_task(whole_in_thread(threads, work))
        await asyncio.to_thread(started.wait, 10)
        call.cancel()
        await _turns(LOOP_TURNS)
        assert not call.done() and ended == []
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert ended == ["written"]
