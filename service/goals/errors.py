"""The goals' errors (under service.core.errors.TunefleetError):

TunefleetError
├── UnknownGoalError     a goal id that the store does not hold
└── ConfigError
    └── GoalConflictError   a goal started under an id another goal (another spec) holds
"""

from __future__ import annotations

from service.core.errors import ConfigError, TunefleetError


class UnknownGoalError(TunefleetError):
    """A goal id that the store does not hold."""


class GoalConflictError(ConfigError):
    """A goal started under an id that another goal (another spec) holds."""
