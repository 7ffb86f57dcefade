"""The demo world's draws: whether a demo run passes and whether the demo analyzer flips its verdict,
each drawn from its own generator, seeded by what the draw is about and nothing else.

The key of a draw is (the adapter's `seed`, the case, its rev, the system version, the phase, the
attempt, the evaluation item's repeat (0 in the case's own loop) and, for a gate's items, the gate's
evaluation (its rounds are evaluations whose repeats start at 1 again: each must draw afresh, while
the base's evaluations, shared by the gates on one base, draw alike), the run's index within its try (a
void run set aside is followed by a fresh draw) and what is drawn). A SHA-256 of the key seeds a
`random.Random` made for that one draw: no global generator, no state carried from one draw to the
next. So a run or a grade is the same on any worker, after a crash, in any order, and a gate's or an
evaluation's items can be run again bit for bit. The tuning's name is not in the key: two tunings
with one seed draw alike on a version they share.

The probabilities drawn against are the ground truth's (service.kinds.cases.truth); a probability of
0 or 1 is no draw at all, so a case without chance knobs behaves as it always did.
"""

from __future__ import annotations

import hashlib
import random

from workers.adapters.base import AnalyzeRequest, RunRequest, StepRequest

KEY_SEPARATOR = "\x1f"


def uniform(*key: object) -> float:
    """A number in [0, 1) that depends on `key` alone (each part as `str` gives it)."""
    digest = hashlib.sha256(KEY_SEPARATOR.join(map(str, key)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).random()


def _key(seed: int, request: StepRequest, version: str) -> tuple[object, ...]:
    key: tuple[object, ...] = (seed, request.case_id, request.rev, version, request.phase, request.attempt)
    key += (request.repeat,)
    if request.evaluation is not None:  # a case's own tries keep the key they always had
        key += (request.evaluation,)
    return key


def run_passes(seed: int, request: RunRequest, pass_p: float) -> bool:
    """Whether the run of `request`, which passes with probability `pass_p`, passes."""
    if pass_p >= 1:
        return True
    if pass_p <= 0:
        return False
    return uniform(*_key(seed, request, request.version), request.run_index, "run") < pass_p


def judge_flips(seed: int, request: AnalyzeRequest, judge_flip: float) -> bool:
    """Whether the analyzer's verdict on the run of `request` is flipped (probability `judge_flip`)."""
    if judge_flip <= 0:
        return False
    return uniform(*_key(seed, request, request.run.version), "judge") < judge_flip
