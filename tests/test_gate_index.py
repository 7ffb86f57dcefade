"""The gate draws the cases that passed from its index (a Redis sorted set kept as cases end): the same
cases, in the same order, as the walk of every case folder it replaces; without walking once built."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis

from service.core.models.acceptance import GateConfig
from service.core.models.case import Case
from service.core.models.records import CaseResult
from service.core.store import TuningStore
from service.kinds.evals.gate.cases import choose
from service.kinds.evals.gate.index import note_passed, passed_cases, rank
from tests.support.redis_server import RedisServer

RUBRIC = [{"id": "a", "text": "says a"}]


def _case(tuning: TuningStore, case_id: str, rev: int, state: str | None) -> None:
    """Case `case_id`'s folder at `rev`, ended `state` (None: not ended)."""
    store = tuning.case(case_id, rev)
    store.root.mkdir(parents=True, exist_ok=True)
    store.write_case(Case.model_validate({"id": case_id, "rev": rev, "input": "q", "rubric": RUBRIC}))
    if state is not None:
        store.write_result(
            CaseResult.model_validate({"case": case_id, "rev": rev, "state": state, "at": datetime.now(UTC)})
        )


def _tuning(root: Path) -> TuningStore:
    tuning = TuningStore(root / "t1", "t1")
    tuning.root.mkdir(parents=True)
    tuning.config_file.write_text("{}")  # the index reads only its mtime
    return tuning


def _walked(config: GateConfig, tuning: TuningStore, skip: frozenset[str], but: str) -> list[str]:
    """The draw as the walk made it: every passed case but `but` and `skip`, by rank, the first `sample`."""
    passed = [c.id for c in passed_cases(tuning, skip, but)]
    return sorted(sorted(passed, key=lambda c: rank(config.seed, c))[: config.sample])


async def test_the_index_draws_what_the_walk_drew(redis_server: RedisServer, tmp_path: Path) -> None:
    """Over 300 cases (ended completed, difficult, failed, not ended, or passed on an old rev with a newer
    rev running) and 20 draws (each excluding another applying case and a held-out set), the index's
    draw is exactly the walk's; a case that passes later (noted at its end) joins the draw; a case whose
    pass was never noted is left out until the tuning file changes (registered again), when one walk
    puts it back in."""
    tuning = _tuning(tmp_path)
    draw = random.Random(7)
    config = GateConfig(cases="passed", sample=25, seed=11)
    for n in range(300):
        state = draw.choice(["completed", "completed", "completed", "difficult", "failed", None])
        _case(tuning, f"c{n:03d}", 1, state)
        if state == "completed" and draw.random() < 0.1:
            _case(tuning, f"c{n:03d}", 2, None)  # a newer rev running: not a pass any more
    async with Redis.from_url(redis_server.url) as redis:
        for k in range(20):
            held = frozenset(f"c{n:03d}" for n in draw.sample(range(300), 30))
            but = f"c{draw.randrange(300):03d}"
            chosen = await choose(redis, config, tuning, held, but)
            assert [c.id for c in chosen.passed] == _walked(config, tuning, held, but), k
        # a new pass, noted at its end as the loop does: drawn without a walk
        first = min((f"n{n:03d}" for n in range(200)), key=lambda c: rank(config.seed, c))
        await note_passed(redis, "t1", config.seed, first)
        _case(tuning, first, 1, "completed")
        assert first in [c.id for c in (await choose(redis, config, tuning, frozenset(), "")).passed]
        # a pass the index was never told of: the index does not walk...
        second = min((f"m{n:03d}" for n in range(200)), key=lambda c: rank(config.seed, c))
        _case(tuning, second, 1, "completed")
        assert second not in [c.id for c in (await choose(redis, config, tuning, frozenset(), "")).passed]
        # ...until the tuning is registered again
        stat = tuning.config_file.stat()
        os.utime(tuning.config_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        again = await choose(redis, config, tuning, frozenset(), "")
        assert [c.id for c in again.passed] == _walked(config, tuning, frozenset(), "")
        assert second in [c.id for c in again.passed]
