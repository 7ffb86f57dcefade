"""A worker's job slots (its `concurrency`): each job it runs holds one from its claim until its function
ends. A job that waits on jobs the fleet runs for it (an apply waiting for its gate's items,
workers.gate) lends its slot meanwhile, so that the scheduler claims those jobs into it.

A job that will start no agent any more gives its slot up (`give_up`): a case recording its end
(its memory kept, its result written and sent) does it beside the next job's claim and start.

A lent slot is the job's again at once when its wait ends, even if that puts the worker one job over its
`concurrency` until another job ends: what such a job does next (publish or reject its candidate) starts
no agent. A run start that waits for the pending applies (`wait_for_apply`) does not lend its slot: it
would take it back to start an agent, so it would have to wait for a slot then, behind jobs the worker
claimed meanwhile and that other workers could have run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Slots:
    """The slots of one worker process, by the jobs that hold or lend them."""

    def __init__(self, size: int, on_free: Callable[[], None] = lambda: None) -> None:
        self.size = size
        self.on_free = on_free
        """Called when a job ends or gives its slot up (set by the scheduler: it may wake its poll)."""
        self.on_lend = on_free
        """Called when a job lends its slot for jobs it just had enqueued (the scheduler wakes its poll)."""
        self._held: set[str] = set()
        self._lent: set[str] = set()

    def free(self) -> int:
        """Slots the scheduler may claim jobs into now (lent ones count as free)."""
        return max(0, self.size - len(self._held - self._lent))

    def hold(self, job_id: str) -> None:
        """A claimed job takes a slot."""
        self._held.add(job_id)

    def release(self, job_id: str) -> None:
        """The job's function ended: its slot is free."""
        self._held.discard(job_id)
        self._lent.discard(job_id)
        self.on_free()

    def give_up(self, job_id: str) -> None:
        """The job will start no agent any more (what is left is recording its end): its slot counts as
        free from now on, so that the next job is claimed and starts while this one ends. Giving it up
        again wakes nobody (the case's end and the memory kept before it both say so)."""
        if job_id in self._lent:
            return
        self._lent.add(job_id)
        self.on_free()

    @contextmanager
    def lent(self, job_id: str) -> Iterator[None]:
        """While in this block the job's slot counts as free; it is the job's again at the block's end."""
        self._lent.add(job_id)
        self.on_lend()
        try:
            yield
        finally:
            self._lent.discard(job_id)
