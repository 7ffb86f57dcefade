"""Redis calls that many tasks of one process make in the same event-loop turn, sent as one pipeline.

A worker runs many cases at once, and their steps end and begin in bursts: a hundred cases each
writing an event and checking a lease would be two hundred round trips, each paying redis-py's full
per-call cost. `RedisBatch` queues the calls made while the loop runs its ready callbacks and sends
them together on the loop's next turn (one round trip, results handed back call by call), so a
lone call costs what it did and a burst costs a fraction. Callers await their own result as
before: an error (a dropped connection, a script error) reaches the caller whose call it was, or
every caller of the batch if the round trip itself failed. A call whose caller was cancelled
before the batch left is not sent, nor one queued `after` a future that failed (the event sink's
call, after the event's line: an event whose line could not be written never reaches Redis).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError


@dataclass(frozen=True)
class _Call:
    args: tuple[Any, ...]
    script: AsyncScript | None
    result: asyncio.Future[Any]
    after: asyncio.Future[Any] | None = None
    """Sent only if this has not failed (it is done by then: see `queue_script`)."""

    def dropped(self) -> bool:
        return self.result.cancelled() or (
            self.after is not None
            and self.after.done()
            and (self.after.cancelled() or self.after.exception() is not None)
        )


def _live(calls: list[_Call]) -> list[_Call]:
    """The calls still to send; a dropped one is cancelled."""
    for call in calls:
        if call.dropped():
            call.result.cancel()
    return [call for call in calls if not call.result.cancelled()]


class RedisBatch:
    """One per process (or per connection pool): the calls its tasks make, batched by loop turn."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._queued: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def command(self, *args: Any) -> Any:
        """Run one Redis command, e.g. `command("GET", key)`."""
        return await self.queue_command(*args)

    def queue_command(self, *args: Any) -> asyncio.Future[Any]:
        """`command` queued now, without waiting: its result to await."""
        return self._enqueue(args, None)

    async def script(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a script registered with `redis.register_script` (by its SHA; loaded when Redis lacks it)."""
        return await self.queue_script(script, keys, args)

    def queue_script(
        self,
        script: AsyncScript,
        keys: Sequence[Any],
        args: Sequence[Any],
        after: asyncio.Future[Any] | None = None,
    ) -> asyncio.Future[Any]:
        """`script`'s call queued now, without waiting: its result to await. With `after`, a future
        settled by a callback of the loop's next turn (a `LineBatch.queue`'s), the call is sent only if
        that did not fail, and is cancelled if it did: the batch leaves in a task that the next turn
        starts, so it always runs after those callbacks."""
        return self._enqueue(("EVALSHA", script.sha, len(keys), *keys, *args), script, after)

    def _enqueue(
        self, args: tuple[Any, ...], script: AsyncScript | None, after: asyncio.Future[Any] | None = None
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        call = _Call(args, script, loop.create_future(), after)
        self._queued.append(call)
        if len(self._queued) == 1:
            loop.call_soon(self._send_queued)
        return call.result

    def _send_queued(self) -> None:
        calls, self._queued = self._queued, []  # those dropped meanwhile are left out in `_send`
        task = asyncio.ensure_future(self._send(calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, calls: list[_Call]) -> None:
        calls = _live(calls)
        if not calls:
            return
        try:
            replies = await self._round_trip(calls)
            missing = [c for c, r in zip(calls, replies, strict=True) if isinstance(r, NoScriptError)]
            if missing:  # Redis restarted or flushed its scripts: load them, then send those calls again
                for script in {id(c.script): c.script for c in missing if c.script is not None}.values():
                    await self.redis.script_load(script.script)
                again = iter(await self._round_trip(missing))
                replies = [next(again) if isinstance(r, NoScriptError) else r for r in replies]
        except Exception as exc:  # the round trip failed: every caller of the batch gets the error
            for call in calls:
                if not call.result.done():
                    call.result.set_exception(exc)
            return
        except asyncio.CancelledError:  # the loop is closing: so are the callers
            for call in calls:
                call.result.cancel()
            raise
        for call, reply in zip(calls, replies, strict=True):
            if call.result.done():
                continue
            if isinstance(reply, Exception):
                call.result.set_exception(reply)
            else:
                call.result.set_result(reply)

    async def _round_trip(self, calls: list[_Call]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.execute_command(*call.args)
            return list(await pipe.execute(raise_on_error=False))
