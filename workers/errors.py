"""The error tree of the `workers` package (rooted in service's TunefleetError). The job envelope
(workers.envelope) turns each into one way out of a job, whatever its kind:

TunefleetError
└── WorkerError
    ├── LeaseLost            the job's lease moved to another worker: stop, write nothing
    ├── LockLost             the improvements lock was lost mid-apply: abandon the apply
    ├── ProviderDown         an LLM step's provider stayed down: hand the job back, deferred, no try spent
    ├── KeyRefused           an LLM step's provider refused the key: hold the job's tuning, hand it back
    ├── StoreFull            a write was refused for a full store (ENOSPC, EDQUOT) or a full Redis
    │                        (OOM): hand the job back, nothing marked, and stop claiming (store_full)
    ├── FilesBusy            the job's files are locked by a process that does not answer (frozen, its
    │                        disk hung): hand the job back for later, nothing marked
    ├── OverBudget           the job spent its budget: its kind ends it (a case `difficult`, a goal
    │                        `incomplete`) before the next step starts
    └── JobFault             the job cannot go on for a reason of its own: it ends `failed`
        └── VoidsExhausted   too many void runs (or goal steps) in a row
"""

from __future__ import annotations

from service.core.errors import TunefleetError


class WorkerError(TunefleetError):
    """Base of the errors raised inside a worker."""


class LeaseLost(WorkerError):
    """The job's lease is no longer this worker's."""


class LockLost(WorkerError):
    """The improvements lock is no longer this applier's."""


class KeyRefused(WorkerError):
    """A meta agent's provider refused its key: the job's tuning is held until `tunefleet resume
    TUNING`, and the job handed back, not failed."""


class ProviderDown(WorkerError):
    """A meta agent's provider stayed unavailable through every retry: infrastructure, not the job's
    fault; the job goes back to the queue for later, and no try is spent."""


class StoreFull(WorkerError):
    """A write of the job's was refused for a full store or a full Redis: a fleet-level outage, not the
    job's fault (workers.store_full)."""

    def __init__(self, reason: str, redis: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.redis = redis


class FilesBusy(WorkerError):
    """The job's files stayed locked by another process past the wait (a goal's `.lock`): not the job's
    fault; it goes back to the queue for later."""


class OverBudget(WorkerError):
    """The job's spend reached its budget (the reason says what it spent of what)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JobFault(WorkerError):
    """The job ends `failed` with this message as its reason."""


class VoidsExhausted(JobFault):
    """Too many void runs in a row."""
