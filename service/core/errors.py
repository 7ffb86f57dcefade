"""The error tree of the `service` package (and of everything `workers` builds on it).

    TunefleetError
    ├── ConfigError            a settings or tuning file is wrong (names the file and the field)
    ├── CaseFileError          a case file is wrong (names the file and the field)
    ├── StoreError             the store folder cannot be read or written
    │   └── StaleWriteError    a write carried a lease token that is no longer the case's
    ├── SystemRepoError        a git operation on the system repository failed
    ├── UnknownTuningError     a tuning name that the store does not hold
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


class RedisUnavailableError(TunefleetError):
    """Redis could not be reached, even after retrying."""
