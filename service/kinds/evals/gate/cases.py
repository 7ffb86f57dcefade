"""Which cases a gate runs: the tuning's cases that have passed, a regression folder, or both; at most
`sample` of them, drawn with the gate's seed (the same draw for the same cases, whoever draws it). The
cases that passed are read from the gate's index (service.kinds.evals.gate.index), in O(sample)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from redis.asyncio import Redis

from service.core.models.acceptance import GateConfig
from service.core.models.case import Case
from service.core.store import TuningStore
from service.kinds.evals.gate.index import draw_passed, rank
from service.kinds.evals.split import load_cases


@dataclass(frozen=True)
class GateCases:
    """The gate's cases: those that passed (their baseline is a pass) and the regression folder's (their
    baseline is the base version's own grade)."""

    passed: list[Case]
    regression: list[Case]

    @property
    def all(self) -> list[Case]:
        return [*self.passed, *self.regression]


async def choose(
    redis: Redis, config: GateConfig, tuning: TuningStore, held_out: frozenset[str], but: str
) -> GateCases:
    """The gate's cases for an apply of case `but`: at most `config.sample`, a seeded draw; regression
    cases are drawn first (a fixed folder is what the user asked to guard), then passed cases."""
    regression: list[Case] = []
    if config.needs_folder() and config.folder is not None:
        folder = config.folder
        regression = sorted(
            await asyncio.to_thread(load_cases, folder), key=lambda c: rank(config.seed, c.id)
        )
    taken = frozenset(case.id for case in regression)
    regression = regression[: config.sample]
    passed: list[Case] = []
    if config.cases in ("passed", "both"):
        skip = taken | held_out | {but}
        passed = await draw_passed(redis, config, tuning, skip, config.sample - len(regression))
    return GateCases(
        passed=sorted(passed, key=lambda c: c.id), regression=sorted(regression, key=lambda c: c.id)
    )
