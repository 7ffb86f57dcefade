"""The error tree of the `service` package (and of everything `workers` builds on it).

    TunefleetError
    ├── ConfigError            a settings or tuning file is wrong (names the file and the field)
    ├── CaseFileError          a case file is wrong (names the file and the field)
    ├── StoreError             the store folder cannot be read or written
    │   └── StaleWriteError    a write carried a lease token that is no longer the case's
    ├── SystemRepoError        a git operation on the system repository failed
    ├── UnknownTuningError     a tuning name that the store does not hold
    ├── InvalidIdError         an id given to a front end that is not a safe slug (it would name a path)
    ├── UnknownEventKindError  an event kind that the event contract does not have
    ├── EventDataError         an event whose data (or field) is not what its kind's model says
    └── RedisUnavailableError  Redis could not be reached after the retry policy gave up

Foreign exceptions are translated where they cross into this package (`raise X(...) from exc`).
"""

from __future__ import annotations


class TunefleetError(Exception):
    """Base of every error tunefleet raises on purpose."""


class ConfigError(TunefleetError):
    """A settings or tuning file is malformed: the message names the file and the field."""


class CaseFileError(TunefleetError):
    """A case file is malformed: the message names the file and the field."""

    def __init__(self, path: str, field: str, expected: str) -> None:
        self.path = path
        self.field = field
        self.expected = expected
        super().__init__(f"{path}: field {field!r}: {expected}")


class StoreError(TunefleetError):
    """The store folder could not be read or written."""


class StaleWriteError(StoreError):
    """A worker tried to write for a case whose lease has moved to another holder."""


class SystemRepoError(TunefleetError):
    """A git command on the system repository failed."""


class UnknownTuningError(TunefleetError):
    """The store holds no tuning of that name."""


class UnknownEventKindError(TunefleetError):
    """An event of a kind that is not in the event contract (service.core.models.events.EventKind)."""


class EventDataError(TunefleetError):
    """An event whose data does not fit its kind's payload model (service.core.models.event_data), or
    whose envelope's field does not: refused before anything is written."""


class RedisUnavailableError(TunefleetError):
    """Redis could not be reached, even after retrying."""


class InvalidIdError(TunefleetError):
    """An id (a tuning's, a goal's, an evaluation's) that is not a safe slug: refused before it names a
    path, whichever front end it came through (service.core.models.case.is_slug)."""

    def __init__(self, what: str, value: str) -> None:
        super().__init__(
            f"{what} {value!r}: expected a safe slug (lower-case letters, digits, '.', '_', '-'; "
            "at most 128), not a path"
        )
