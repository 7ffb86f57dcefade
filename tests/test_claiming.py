"""How workers claim cases: every free slot in one poll, a freed slot refilled without waiting for the
next poll, and the due cases spread over the workers with free slots."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from service.core import keys
from tests.support.fleet import Fleet, case, demo_adapter, event_time_s, wait_until, write_tuning
from tests.support.redis_server import RedisServer

POLL_S = 3.0


def _times(events: list[dict[str, Any]], kind: str) -> dict[str, float]:
    return {e["case"]: event_time_s(e) for e in events if e["kind"] == kind}


async def _run(fleet: Fleet, tmp_path: Path, cases: int, slots: int) -> list[dict[str, Any]]:
    """Passing cases of 100 ms steps through one worker with `slots` slots and a long poll delay."""
    fleet.settings = fleet.settings.model_copy(update={"poll_delay_s": POLL_S})
    items = [case(f"c{i}") for i in range(cases)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", items, adapter=demo_adapter(run_ms=100)))
    fleet.start_worker(concurrency=slots)
    await fleet.wait_finished(cases)
    return fleet.events()


async def test_one_poll_fills_every_free_slot(fleet: Fleet, tmp_path: Path) -> None:
    """Four queued cases and four free slots: all four start within one poll, not one per poll."""
    started = _times(await _run(fleet, tmp_path, cases=4, slots=4), "case_started")
    assert max(started.values()) - min(started.values()) < POLL_S / 2, started


async def test_a_freed_slot_takes_the_next_case_before_the_next_poll(fleet: Fleet, tmp_path: Path) -> None:
    """With one slot and a long poll delay, each case starts as soon as the one before it ends."""
    events = await _run(fleet, tmp_path, cases=3, slots=1)
    started, ended = _times(events, "case_started"), _times(events, "case_completed")
    order = sorted(started, key=started.__getitem__)
    waits_s = [started[after] - ended[before] for before, after in itertools.pairwise(order)]
    assert len(waits_s) == 2 and all(w < POLL_S / 2 for w in waits_s), waits_s


async def test_two_idle_workers_share_the_due_cases(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """2 workers of 20 slots, 12 long cases submitted at once: neither worker takes more than 8."""
    workers = [fleet.start_worker(concurrency=20) for _ in range(2)]
    with redis_server.client() as r:
        await wait_until(lambda: r.hlen(keys.free_slots()) == 2, 30, "both workers polling")
    items = [case(f"c{i}") for i in range(12)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", items, adapter=demo_adapter(run_ms=60_000)))
    await wait_until(
        lambda: sum(e["kind"] == "case_started" for e in fleet.events()) == 12, 30, "all 12 cases started"
    )
    held = Counter(e["worker"].rsplit(":", 1)[1] for e in fleet.events() if e["kind"] == "case_started")
    assert set(held) == {str(w.pid) for w in workers} and max(held.values()) <= 8, held
