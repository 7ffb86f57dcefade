"""Emitting events: one line in the tuning's `events.jsonl` (the lines of one loop turn in one write),
one entry in the Redis stream, and the live counters the event moves, in one round trip (one script
call, sent with the process's other calls of the turn). Every event goes through
`EventSink`, which refuses a kind that is not in the contract (`service.core.models.events.EventKind`)
and an event whose data is not its kind's payload model (`service.core.models.event_data`), before
anything is written: the error names the kind and the field."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from redis.asyncio import Redis

from service.core import keys
from service.core.errors import UnknownEventKindError
from service.core.io.batch import RedisBatch
from service.core.io.line_batch import LineBatch
from service.core.models.events import LOGGED_AT_DEBUG, Event, EventKind, event_of
from service.core.models.records import COST_SCALE
from service.core.store import Store, TuningStore

log = structlog.get_logger()

EMIT = """
-- KEYS: events stream, stats hash, running hash
-- ARGV: stream max length, event JSON, running action ('' | 'set' | 'del'), job id, job state,
--       then (counter, amount) pairs
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'event', ARGV[2])
for i = 6, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
if ARGV[3] == 'set' then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
elseif ARGV[3] == 'del' then
  redis.call('HDEL', KEYS[3], ARGV[4])
end
return 1
"""


def known(kind: EventKind) -> EventKind:
    """`kind` if the contract has it; UnknownEventKindError (before anything is written) if not."""
    if isinstance(kind, EventKind):
        return kind
    try:
        return EventKind(kind)
    except ValueError:
        raise UnknownEventKindError(
            f"event kind {kind!r} is not in the contract (service.core.models.events.EventKind)"
        ) from None


CounterRule = Callable[[Event], dict[str, int] | None]
"""A kind's counters rule: the live counters of its tuning that an event of the kind moves, and by how
much, or None when the event is not its kind's. The kinds register theirs (service.kinds.registry); the
first rule that claims an event decides its moves."""


def counter_moves(event: Event, rules: Sequence[CounterRule]) -> dict[str, int]:
    """The live counters of a tuning that an event changes, and by how much: its kind's (the first rule
    that claims it), and tokens and cost as every event does (they count toward the budget)."""
    moves: dict[str, int] = {}
    for rule in rules:
        found = rule(event)
        if found is not None:
            moves.update(found)
            break
    if event.tokens:
        moves["tokens"] = event.tokens
    if event.unmeasured_tokens:
        moves["tokens_unmeasured"] = event.unmeasured_tokens
    if event.estimated_tokens:
        moves["tokens_estimated"] = event.estimated_tokens
    if event.cost_usd:
        moves["cost_usd_micros"] = round(event.cost_usd * COST_SCALE)
    return moves


def _seen(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True)
class QueuedEvent:
    """An event on its way: its line and its script call are queued (`EventSink.queue`)."""

    event: Event
    written: asyncio.Future[None] | None
    sent_call: asyncio.Future[Any]

    def abandon(self) -> None:
        """Nobody will wait for this event (an earlier event of its job failed): it is still
        written and sent, and an error of either is taken as seen, not reported as never retrieved."""
        for future in (self.written, self.sent_call):
            if future is not None:
                future.add_done_callback(_seen)

    async def sent(self) -> Event:
        """The event, once its line is written and Redis took it (logged then, at its kind's level:
        `LOGGED_AT_DEBUG`); the error if not."""
        if self.written is not None:
            await self.written
        await self.sent_call
        event = self.event
        level = logging.DEBUG if event.kind in LOGGED_AT_DEBUG else logging.INFO
        if log.is_enabled_for(level):  # else not even the line's fields are made
            fields = event.model_dump(exclude={"at", "kind", "data"}, exclude_none=True)
            log.log(level, event.kind.value, **fields, **event.data.wire())
        return event


class EventSink:
    """Where every process of the fleet sends its events."""

    def __init__(
        self,
        redis: Redis,
        store: Store,
        events_max: int,
        rules: Sequence[CounterRule],
        worker: str | None = None,
        batch: RedisBatch | None = None,
    ) -> None:
        self.redis = redis
        self._rules = tuple(rules)
        self._batch = batch or RedisBatch(redis)
        self._store = store
        self._events_max = events_max
        self._worker = worker
        self._emit = redis.register_script(EMIT)
        self._lines = LineBatch()
        self._tunings: dict[str, TuningStore] = {}

    def _tuning(self, name: str) -> TuningStore:
        found = self._tunings.get(name)
        if found is None:
            found = self._tunings[name] = self._store.tuning(name)
        return found

    async def emit(
        self,
        kind: EventKind,
        tuning: str | None,
        *,
        running: tuple[str, str | None] | None = None,
        **fields: Any,
    ) -> Event:
        """Record an event; `running` (job id, JSON or None to remove) updates the tuning's running
        hash in the same round trip. An event of no tuning (a goal's, without one) has no events file
        and moves the counters of `keys.GOALS_SCOPE`."""
        return await self.queue(kind, tuning, running=running, **fields).sent()

    def queue(
        self,
        kind: EventKind,
        tuning: str | None,
        *,
        running: tuple[str, str | None] | None = None,
        **fields: Any,
    ) -> QueuedEvent:
        """`emit` without waiting: the event's line and its script call are queued now (and leave on
        the loop's next turn, with whatever else is queued by then); `QueuedEvent.sent` waits for
        them. Events queued one after the other are written and sent in that order."""
        kind = known(kind)
        event = event_of(
            {**fields, "at": datetime.now(UTC), "kind": kind, "tuning": tuning or "", "worker": self._worker}
        )
        line = event.line()
        # The line first (service.core.io.batch: `queue_script`): a line that cannot be written keeps its
        # call from being sent.
        written = self._lines.queue(self._tuning(tuning).events_file, line) if tuning else None
        scope = tuning or keys.GOALS_SCOPE
        action, job_id, state = "", "", ""
        if running is not None:
            job_id, running_state = running
            action, state = ("del", "") if running_state is None else ("set", running_state)
        args: list[str | int] = [self._events_max, line, action, job_id, state]
        for field, amount in counter_moves(event, self._rules).items():
            args += [field, amount]
        scripted = [keys.events(), keys.stats(scope), keys.running(scope)]
        sent = self._batch.queue_script(self._emit, scripted, args, after=written)
        return QueuedEvent(event, written, sent)

    async def emit_many(self, kind: EventKind, tuning: str, items: list[dict[str, Any]]) -> None:
        """Emit one event per item (its fields) at once: one write to events.jsonl, one round trip for
        the stream entries and the counters they move together (every item checked first: a bad one
        writes none; MULTI/EXEC: no reader of the stream sees an entry before its counters move, as with
        `EMIT`)."""
        kind = known(kind)
        if not items:
            return
        now = datetime.now(UTC)
        envelope = {"at": now, "kind": kind, "tuning": tuning, "worker": self._worker}
        events = [event_of({**item, **envelope}) for item in items]
        lines = [event.line() for event in events]
        self._tuning(tuning).append_events(lines)
        moves: dict[str, int] = {}
        for event in events:
            for field, amount in counter_moves(event, self._rules).items():
                moves[field] = moves.get(field, 0) + amount
        async with self.redis.pipeline(transaction=True) as pipe:  # the entries with their counters
            for line in lines:
                pipe.xadd(keys.events(), {"event": line}, maxlen=self._events_max, approximate=True)
            for field, amount in moves.items():
                pipe.hincrby(keys.stats(tuning), field, amount)
            await pipe.execute()
        log.info(kind.value, tuning=tuning, count=len(events))
