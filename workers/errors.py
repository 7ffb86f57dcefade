"""The error tree of the `workers` package (rooted in service's TunefleetError).

TunefleetError
└── WorkerError
    ├── LeaseLost            the case's lease moved to another worker: stop, write nothing
    ├── LockLost             the improvements lock was lost mid-apply: abandon the apply
    └── CaseFault            the case cannot go on for a reason of its own: it ends failed
        └── VoidsExhausted   too many void runs in a row
"""

from __future__ import annotations

from service.errors import TunefleetError


class WorkerError(TunefleetError):
    """Base of the errors raised inside a worker."""


class LeaseLost(WorkerError):
    """The case's lease is no longer this worker's."""


class LockLost(WorkerError):
    """The improvements lock is no longer this applier's."""


class CaseFault(WorkerError):
    """The case ends `failed` with this message as its reason."""


class VoidsExhausted(CaseFault):
    """Too many void runs in a row."""
