"""The error tree of the `workers` package (rooted in service's TunefleetError).

TunefleetError
└── WorkerError
    ├── LeaseLost            the case's lease moved to another worker: stop, write nothing
    ├── LockLost             the improvements lock was lost mid-apply: abandon the apply
    ├── ProviderDown         an LLM step's provider stayed down: hand the case back, deferred
    ├── KeyRefused           an LLM step's provider refused the key: hold the tuning, hand the case back
    └── CaseFault            the case cannot go on for a reason of its own: it ends failed
        └── VoidsExhausted   too many void runs in a row
"""

from __future__ import annotations

from service.core.errors import TunefleetError


class WorkerError(TunefleetError):
    """Base of the errors raised inside a worker."""


class LeaseLost(WorkerError):
    """The case's lease is no longer this worker's."""


class LockLost(WorkerError):
    """The improvements lock is no longer this applier's."""


class KeyRefused(WorkerError):
    """A meta agent's provider refused its key: the tuning is held until `tunefleet resume TUNING`, and
    the case handed back, not failed."""


class ProviderDown(WorkerError):
    """A meta agent's provider stayed unavailable through every retry: infrastructure, not the case's
    fault; the case goes back to the queue for later, and no try is spent."""


class CaseFault(WorkerError):
    """The case ends `failed` with this message as its reason."""


class VoidsExhausted(CaseFault):
    """Too many void runs in a row."""
