"""The leak guard's measure: runs of words a candidate's new text shares with a case.

Texts are normalised (lower case; a word is a run of letters or digits; spacing and punctuation between
words ignored) and cut into every run of `n` consecutive words. A case's runs come from its input and its
rubric items' texts (a case has no separate expected answer: the rubric says what a good answer holds).
A candidate's *new* runs are those it holds and its base version does not: a run the instructions held
already is not this edit's leak.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from service.core.models.case import Case

_WORD = re.compile(r"\w+")
Run = tuple[str, ...]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def runs(text: str, n: int) -> set[Run]:
    """Every run of `n` consecutive words of `text`, normalised."""
    found = words(text)
    return {tuple(found[i : i + n]) for i in range(len(found) - n + 1)}


def case_texts(case: Case) -> list[str]:
    return [case.input, *(item.text for item in case.rubric)]


@dataclass(frozen=True)
class Leak:
    case: str
    held_out: bool
    words: str


class LeakIndex:
    """The word runs of a tuning's cases, by run (built once per tuning and worker)."""

    def __init__(self, n: int, cases: Iterable[tuple[Case, bool]]) -> None:
        self.n = n
        self._owner: dict[Run, tuple[str, bool]] = {}
        for case, held_out in cases:
            for text in case_texts(case):
                for run in runs(text, n):
                    known = self._owner.get(run)
                    if known is None or (held_out and not known[1]):  # a held-out case is named first
                        self._owner[run] = (case.id, held_out)

    def __len__(self) -> int:
        return len(self._owner)

    def find(self, new: set[Run]) -> Leak | None:
        """The first case (held-out ones first) one of the `new` runs comes from, None if none does."""
        found: Leak | None = None
        for run in sorted(new):
            owner = self._owner.get(run)
            if owner is None:
                continue
            leak = Leak(owner[0], owner[1], " ".join(run))
            if leak.held_out:
                return leak
            found = found or leak
        return found
