"""The guards on the worker (service.kinds.evals.guards): a candidate's text and its base's read from the
repository in this process, checked against the tuning's cases, before its gate evaluates it. No Redis
round trip and no run: the cases' word runs are indexed once per tuning and worker (`leak_index`), and
the applying case's own are added at each check."""

from __future__ import annotations

import asyncio
import time

from service.core.errors import CaseFileError
from service.core.models.case import Case
from service.core.models.guards import GuardsConfig, SizeBudget
from service.kinds.evals.gate.models import Candidate
from service.kinds.evals.guards.check import check
from service.kinds.evals.guards.leak import LeakIndex
from service.kinds.evals.guards.models import GuardRejection
from service.kinds.evals.history.commits import History
from service.kinds.evals.history.tokens import count_tokens
from service.kinds.evals.split import load_cases
from workers.kinds.cases.run import CaseRun
from workers.tuning import TuningRuntime


def _cases(tuning: TuningRuntime, config: GuardsConfig) -> list[tuple[Case, bool]]:
    """The tuning's cases to guard against, each with whether it is held out: its case folder's and its
    held-out folder's (held-out cases are never submitted to the store), then those the store holds."""
    found: dict[str, tuple[Case, bool]] = {}
    folders = [tuning.config.cases]
    if tuning.config.holdout is not None and tuning.config.holdout.cases is not None:
        folders.append(tuning.config.holdout.cases)
    for index, folder in enumerate(folders):
        try:
            for case in load_cases(folder, strict=False):
                held_out = index == 1 or case.id in tuning.held_out
                found[case.id] = (case, held_out)
        except (CaseFileError, OSError):
            continue  # a folder this machine cannot read: the store's copies below
    for case_store in tuning.store.latest_revs():
        if case_store.case_id not in found:
            stored = case_store.load_case()
            if stored is not None:
                found[stored.id] = (stored, stored.id in tuning.held_out)
    return [(case, held) for case, held in found.values() if held or config.leak_training]


async def leak_index(tuning: TuningRuntime, config: GuardsConfig) -> LeakIndex:
    """The word runs of the tuning's cases, built once per tuning and worker (off the event loop)."""
    assert config.leak_min_words is not None
    if tuning.leak_index is None or tuning.leak_index.n != config.leak_min_words:
        cases = await asyncio.to_thread(_cases, tuning, config)
        tuning.leak_index = LeakIndex(config.leak_min_words, cases)
    return tuning.leak_index


async def size_budget(tuning: TuningRuntime, version: str) -> SizeBudget | None:
    """What the applier is told of the guards' size limits, measured on `version` (None: no guards)."""
    config = tuning.config.guards
    if config is None:
        return None

    def measure() -> int:
        history = History(tuning.store.repo)
        return history.tokens(history.commit(version))

    return SizeBudget.of(config, await asyncio.to_thread(measure))


def _texts(history: History, version: str) -> list[str]:
    return [text for _, text in history.texts(history.commit(version).tree)]


async def guard_candidate(case_run: CaseRun, candidate: Candidate) -> GuardRejection | None:
    """The first guard's rejection of `candidate`, or None when every guard passes (or there is none)."""
    config = case_run.tuning.config.guards
    if config is None:
        return None
    began = time.perf_counter()
    indexes: list[LeakIndex | None] = []
    if config.leak_min_words is not None:
        indexes.append(await leak_index(case_run.tuning, config))
        if config.leak_training:  # the applying case, submitted after the index was built, say
            indexes.append(LeakIndex(config.leak_min_words, [(case_run.case, False)]))
    await asyncio.to_thread(count_tokens, "")  # the tokenizer's table loads once, off the event loop
    history = History(case_run.tuning.store.repo)
    base, made = _texts(history, candidate.base), _texts(history, candidate.version)
    verdict, size = None, None
    for index in indexes or [None]:
        verdict, size = check(config, base, made, index)
        if verdict is not None:
            break
    assert size is not None
    case_run.log.info(
        "guards_checked",
        candidate=candidate.version,
        rejected_by=verdict.guard if verdict is not None else None,
        tokens_before=size.before,
        tokens_after=size.after,
        check_ms=round((time.perf_counter() - began) * 1000, 3),
    )
    if verdict is None:
        return None
    return GuardRejection(
        guard=verdict.guard,
        candidate=candidate.version,
        base=candidate.base,
        why=verdict.why,
        case=verdict.case,
        words=verdict.words,
        tokens_before=size.before,
        tokens_after=size.after,
    )
