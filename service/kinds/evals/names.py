"""The ids of evaluations the fleet makes for itself, and the rule that keeps them its own.

An evaluation's id names its folder, `<store>/evals/<id>`, one namespace for the whole store. The
fleet makes three kinds of evaluation under ids of fixed forms: the daemon's held-out runs
(`<tuning>.holdout-initial`, `<tuning>.holdout-final`) and the acceptance gate's
(`gate-<digest>`, `gate-base-<digest>`). Those forms are *reserved*: a name a client asks for
(`tunefleet eval --name`, `POST /api/tunings/{tuning}/evals`) may not take one, so no client can
supply the measure a report or a gate reads. The fleet checks, besides, that an evaluation it finds
under one of its ids is its own (the tuning and the purpose in its spec), so a store written before
this rule cannot forge one either.

Ids are per tuning where the fleet makes them: each embeds its tuning (the held-out ids whole, or
cut with a digest of the whole name when that is too long for a slug; the gate's digest covers the
tuning), so one tuning's id is never another's.
"""

from __future__ import annotations

import hashlib

INITIAL_SUFFIX = ".holdout-initial"
FINAL_SUFFIX = ".holdout-final"
GATE_PREFIXES = ("gate-",)
"""`gate-<digest>` and `gate-base-<digest>` (workers.kinds.evals.gate.evaluate)."""

TUNING_PART_MAX = 100
"""The longest tuning name kept whole in a held-out id (an id is a slug: 128 characters at most)."""


def _tuning_part(tuning: str) -> str:
    if len(tuning) <= TUNING_PART_MAX:
        return tuning
    digest = hashlib.sha256(tuning.encode()).hexdigest()[:12]
    return f"{tuning[: TUNING_PART_MAX - 13]}-{digest}"


def initial_eval_id(tuning: str) -> str:
    """The id of the daemon's evaluation of a tuning's imported version on its held-out cases."""
    return _tuning_part(tuning) + INITIAL_SUFFIX


def final_eval_id(tuning: str) -> str:
    """The id of the daemon's evaluation of a tuning's final version on its held-out cases."""
    return _tuning_part(tuning) + FINAL_SUFFIX


def is_gate_eval(eval_id: str) -> bool:
    """Whether an evaluation is one of the acceptance gate's (its id has the gate's reserved form)."""
    return eval_id.startswith(GATE_PREFIXES)


def reserved(name: str) -> bool:
    """Whether an evaluation name has one of the fleet's own forms (no client may ask for it)."""
    return name.endswith((INITIAL_SUFFIX, FINAL_SUFFIX)) or is_gate_eval(name)
