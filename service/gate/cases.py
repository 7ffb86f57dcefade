"""Which cases a gate runs: the tuning's cases that have passed, a regression folder, or both; at most
`sample` of them, drawn with the gate's seed (the same draw for the same cases, whoever draws it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from service.core.models.case import Case
from service.core.store import TuningStore
from service.evals.split import load_cases
from service.gate.config import GateConfig


@dataclass(frozen=True)
class GateCases:
    """The gate's cases: those that passed (their baseline is a pass) and the regression folder's (their
    baseline is the base version's own grade)."""

    passed: list[Case]
    regression: list[Case]

    @property
    def all(self) -> list[Case]:
        return [*self.passed, *self.regression]


def passed_cases(tuning: TuningStore, held_out: frozenset[str], but: str) -> list[Case]:
    """The tuning's cases whose newest rev ended `completed` (every published version went through the
    gate, so they pass on the current version as far as the gates sampled), except case `but`."""
    found = []
    for case_store in tuning.latest_revs():
        if case_store.case_id == but or case_store.case_id in held_out:
            continue
        result = case_store.result()
        if result is None or result.state != "completed":
            continue
        case = case_store.load_case()
        if case is not None:
            found.append(case)
    return found


def _rank(seed: int, case_id: str) -> bytes:
    return hashlib.sha256(f"gate:{seed}:{case_id}".encode()).digest()


def choose(config: GateConfig, tuning: TuningStore, held_out: frozenset[str], but: str) -> GateCases:
    """The gate's cases for an apply of case `but`: at most `config.sample`, a seeded draw; regression
    cases are drawn first (a fixed folder is what the user asked to guard), then passed cases."""
    regression: list[Case] = []
    if config.needs_folder() and config.folder is not None:
        regression = sorted(load_cases(config.folder), key=lambda c: _rank(config.seed, c.id))
    passed: list[Case] = []
    if config.cases in ("passed", "both"):
        taken = {case.id for case in regression}
        passed = [c for c in passed_cases(tuning, held_out, but) if c.id not in taken]
        passed.sort(key=lambda c: _rank(config.seed, c.id))
    regression = regression[: config.sample]
    passed = passed[: config.sample - len(regression)]
    return GateCases(
        passed=sorted(passed, key=lambda c: c.id), regression=sorted(regression, key=lambda c: c.id)
    )
