"""The errors of evaluations (service.kinds.evals), under the service's tree (service.core.errors):

    TunefleetError
    └── EvalError            something about an evaluation
        ├── EvalInputError   an evaluation asked for wrongly: an unknown version or commit, an empty
        │                    split, --repeat 0, a tuning with no cases, a held-out split that cannot
        │                    be drawn; nothing was queued
        ├── UnknownEvalError an evaluation id the store does not hold
        └── HeldOutError     a held-out case asked to run as a case (tuned on): refused

Each message is one line naming the thing, the field and what was expected.
"""

from __future__ import annotations

from service.core.errors import TunefleetError


class EvalError(TunefleetError):
    """Something about an evaluation."""


class EvalInputError(EvalError):
    """An evaluation asked for wrongly; nothing was queued."""


class UnknownEvalError(EvalError):
    """An evaluation id that the store does not hold."""


class HeldOutError(EvalError):
    """A held-out case was to run as a case of its tuning: it is never tuned on, only evaluated."""
