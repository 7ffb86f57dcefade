"""The goals' errors (under service.core.errors.TunefleetError):

TunefleetError
├── UnknownGoalError     a goal id that the store does not hold
├── GoalBusyError        a goal's lock held past its wait by a process that no longer answers
└── ConfigError
    └── GoalConflictError   a goal started under an id another goal (another spec) holds
"""

from __future__ import annotations

from service.core.errors import ConfigError, TunefleetError


class UnknownGoalError(TunefleetError):
    """A goal id that the store does not hold."""


class GoalBusyError(TunefleetError):
    """A goal's lock (its folder's `.lock`) held past `LOCK_WAIT_S` by a process that no longer answers."""


class GoalConflictError(ConfigError):
    """A goal started under an id that another goal (another spec) holds."""
