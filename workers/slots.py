"""A worker's job slots (its `concurrency`): each job it runs holds one from its claim until its function
ends. A job that waits on jobs the fleet runs for it (an apply waiting for its gate's items,
workers.kinds.evals.gate) lends its slot meanwhile, so that the scheduler claims those jobs into it.

A job that will start no agent any more gives its slot up (`give_up`): a case recording its end
(its memory kept, its result written and sent) does it beside the next job's claim and start.

A job about to start an agent goes first: from its claim, and from each agent's end, until its next
agent starts (or it waits on the fleet, gives its slot up or ends), it is `starting`; so is the claim
that a freed slot makes due. The bookkeeping that no slot waits for (a step's record landing while the
next agent runs, a case recording its end) waits its `turn`: until nothing is starting, at most
`BOOKKEEPING_WAIT_MAX_S`. On one event loop, a hundred cases that end their agents together would
otherwise each wait for the others' bookkeeping before their next agent starts (docs/architecture.md,
"Agents before bookkeeping").

A lent slot is the job's again at once when its wait ends, even if that puts the worker one job over its
`concurrency` until another job ends: what such a job does next (publish or reject its candidate) starts
no agent. A run start that waits for the pending applies (`wait_for_apply`) does not lend its slot: it
would take it back to start an agent, so it would have to wait for a slot then, behind jobs the worker
claimed meanwhile and that other workers could have run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

BOOKKEEPING_WAIT_MAX_S = 1.0
"""How long bookkeeping waits for the starts under way at most (then it goes on beside them)."""
TURNS_AT_ONCE = 8
"""Bookkeeping let go per turn of the event loop: a hundred cases' ends let go together held the loop
for 60 ms, and a start that came meanwhile waited for all of them."""


class Slots:
    """The slots of one worker process, by the jobs that hold or lend them."""

    def __init__(
        self,
        size: int,
        on_free: Callable[[], None] = lambda: None,
        bookkeeping_wait_max_s: float = BOOKKEEPING_WAIT_MAX_S,
    ) -> None:
        self.size = size
        self.bookkeeping_wait_max_s = bookkeeping_wait_max_s
        self.on_free = on_free
        """Called when a job ends or gives its slot up (set by the scheduler: it may wake its poll)."""
        self.on_lend = on_free
        """Called when a job lends its slot for jobs it just had enqueued (the scheduler wakes its poll)."""
        self._held: set[str] = set()
        self._lent: set[str] = set()
        self._starting: set[str] = set()
        """Jobs about to start an agent."""
        self._claim_due = False
        self._turns: list[asyncio.Future[None]] = []
        """Bookkeeping waiting for the starts under way to be over."""
        self._last_turns: list[asyncio.Future[None]] = []
        """Bookkeeping waiting for the starts and for the records landing (`after_records`)."""
        self._records = 0
        """Records landing (written behind) now."""
        self._settling = False
        """Whether `_settle` lets more go at the loop's next turn."""
        self._deadline: asyncio.TimerHandle | None = None
        """Lets the waiting bookkeeping go, `bookkeeping_wait_max_s` after the first of it came."""

    def free(self) -> int:
        """Slots the scheduler may claim jobs into now (lent ones count as free)."""
        return max(0, self.size - len(self._held - self._lent))

    def hold(self, job_id: str) -> None:
        """A claimed job takes a slot, and is starting until its first agent starts."""
        self._held.add(job_id)
        self._start(job_id, True)

    def release(self, job_id: str) -> None:
        """The job's function ended: its slot is free."""
        self._held.discard(job_id)
        self._lent.discard(job_id)
        self.on_free()
        self._start(job_id, False)

    def starting(self, job_id: str, starts: bool) -> None:
        """The job is about to start an agent (its agent ended, and another follows), or no longer is (an
        agent started; it waits on the fleet)."""
        if job_id in self._held:
            self._start(job_id, starts)

    def claim_due(self, due: bool) -> None:
        """The scheduler is about to claim jobs into free slots, or is done claiming."""
        self._claim_due = due
        self._settle()

    def record_landing(self, landing: asyncio.Future[None]) -> None:
        """A step's record is landing (until `landing` is done): a case's end waits for it."""
        self._records += 1
        landing.add_done_callback(self._record_landed)

    def _record_landed(self, _: asyncio.Future[None]) -> None:
        self._records -= 1
        self._settle()

    def turn(self, after_records: bool = False) -> asyncio.Future[None]:
        """Bookkeeping's turn: a future done once nothing is starting (`after_records`: and no step's record
        is landing either: a case's end comes after the steps that end meanwhile), or at most
        `bookkeeping_wait_max_s` from now (whoever needs the bookkeeping done sooner sets its result:
        `hurry`)."""
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        if not self._claim_due and not self._starting and not (after_records and self._records):
            turn.set_result(None)
            return turn
        (self._last_turns if after_records else self._turns).append(turn)
        if self._deadline is None:  # one timer for the bookkeeping waiting together
            self._deadline = loop.call_later(self.bookkeeping_wait_max_s, self._let_go)
        return turn

    def _start(self, job_id: str, starts: bool) -> None:
        if starts:
            self._starting.add(job_id)
        else:
            self._starting.discard(job_id)
        self._settle()

    def _settle(self) -> None:
        if not self._settling:  # else the loop's next turn lets more go
            self._release()

    def _release(self) -> None:
        """Let the waiting bookkeeping go, TURNS_AT_ONCE per turn of the event loop, while nothing starts
        (the records before the ends)."""
        self._settling = False
        if self._claim_due or self._starting:
            return
        for waiting in (self._turns, self._last_turns):  # hurried by their jobs meanwhile: nothing to let go
            waiting[:] = [turn for turn in waiting if not turn.done()]
        queue = self._turns if self._turns else self._last_turns if not self._records else None
        if not queue:
            return
        for turn in queue[:TURNS_AT_ONCE]:
            hurry(turn)
        del queue[:TURNS_AT_ONCE]
        if self._turns or self._last_turns:
            self._settling = True
            asyncio.get_running_loop().call_soon(self._release)
        elif self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _let_go(self) -> None:
        """The oldest bookkeeping waited `bookkeeping_wait_max_s`: all of it goes now."""
        self._deadline = None
        turns, self._turns, self._last_turns = self._turns + self._last_turns, [], []
        for turn in turns:
            hurry(turn)

    def give_up(self, job_id: str) -> None:
        """The job will start no agent any more (what is left is recording its end): its slot counts as
        free from now on, so that the next job is claimed and starts while this one ends. Giving it up
        again wakes nobody (the case's end and the memory kept before it both say so)."""
        if job_id in self._lent:
            return
        self._lent.add(job_id)
        self._start(job_id, False)
        self.on_free()

    @contextmanager
    def lent(self, job_id: str) -> Iterator[None]:
        """While in this block the job's slot counts as free; it is the job's again at the block's end."""
        self._lent.add(job_id)
        self._start(job_id, False)
        self.on_lend()
        try:
            yield
        finally:
            self._lent.discard(job_id)


def hurry(turn: asyncio.Future[None]) -> None:
    """Let the bookkeeping waiting for `turn` go now."""
    if not turn.done():
        turn.set_result(None)
