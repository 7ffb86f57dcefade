"""How workers claim cases: every free slot in one poll, a freed slot refilled without waiting for the
next poll (but no claim sent for it once the queue was found dry), a slot given up while its case (or
eval item) records its end, and the due cases spread over the workers with free slots."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

from service.core import keys
from tests.support.fleet import (
    Fleet,
    case,
    case_folder,
    demo_adapter,
    event_time_s,
    settings_env,
    wait_until,
    write_tuning,
)
from tests.support.redis_server import RedisServer
from tests.test_command_loop import R1_CASE, agent

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


async def test_a_case_gives_its_slot_up_while_it_records_its_end(fleet: Fleet, tmp_path: Path) -> None:
    """One slot, two cases whose passing runs leave a memory of 900 files: once the first case's last
    agent has ended, its slot is free (`Slots.give_up`), so the second case is claimed and started while
    the first still keeps its memory (a copy of 900 files in a thread), before its `case_completed`."""
    hoard = agent("hoard", "run")
    hoard["argv"] = [*hoard["argv"], "--hoard-files", "900"]
    body = {"runner": hoard, "analyzer": agent("normal", "analyze"), "applier": agent("normal", "apply")}
    items = [{**R1_CASE, "id": cid} for cid in ("c1", "c2")]
    await fleet.start_tuning(write_tuning(tmp_path / "t", items, name="t1", **body))
    fleet.start_worker(concurrency=1)
    rows = await fleet.wait_finished(2)
    assert {row.state for row in rows.values()} == {"completed"}, rows
    ends = ("case_started", "case_completed")
    order = [(e["kind"], e["case"]) for e in fleet.events() if e["kind"] in ends]
    first = order[0][1]
    second = "c2" if first == "c1" else "c1"
    assert order.index(("case_started", second)) < order.index(("case_completed", first)), order


async def test_an_eval_item_gives_its_slot_up_while_it_records_its_end(fleet: Fleet, tmp_path: Path) -> None:
    """One slot, an evaluation of two items: once the first item's analysis has ended, its slot is free,
    so the second item is claimed and started before the first item's outcome is written and its
    `eval_item_ended` sent, as a case's end does (`CaseRun.wind_down`)."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [], adapter=demo_adapter(run_ms=50)))
    folder = case_folder(tmp_path / "eval-cases", [case("c1"), case("c2")])
    async with fleet.client() as client:
        await client.evals.create("t1", cases=folder, name="e1")
    fleet.start_worker(concurrency=1)
    ends = ("eval_item_started", "eval_item_ended")

    def order() -> list[tuple[str, str]]:
        return [(e["kind"], e["case"]) for e in fleet.events() if e["kind"] in ends]

    await wait_until(lambda: len(order()) == 4, 60, "both items to end")
    got = order()
    first = got[0][1]
    second = "c2" if first == "c1" else "c1"
    assert got.index(("eval_item_started", second)) < got.index(("eval_item_ended", first)), got


async def test_a_slot_freed_after_the_queue_ran_dry_sends_no_claim(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Two cases on four slots and a poll delay longer than the test: the first claim takes both and
    finds no more, so neither case's end (each frees its slot twice: its last agent, its function)
    sends a claim. Every claim stamps the worker's free-slots record with Redis's time: when both cases
    have ended, the stamp is still the first claim's, from before either case started."""
    fleet.settings = fleet.settings.model_copy(update={"poll_delay_s": 600.0})
    items = [case("c0"), case("c1")]
    await fleet.start_tuning(write_tuning(tmp_path / "t", items, adapter=demo_adapter(run_ms=50)))
    fleet.start_worker(concurrency=4)
    await fleet.wait_finished(len(items))
    with redis_server.client() as r:
        (record,) = cast(dict[bytes, bytes], r.hgetall(keys.free_slots())).values()
    left, stamp_ms = (int(part) for part in record.split(b":"))
    events = fleet.events()
    assert left == 2
    assert stamp_ms <= 1000 * min(_times(events, "case_started").values()) + 1, (stamp_ms, events)
    assert len(_times(events, "case_completed")) == 2


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


async def test_a_burst_worker_runs_the_queue_dry_and_exits(fleet: Fleet, tmp_path: Path) -> None:
    """`--burst`: a worker runs every queued case to its end, then exits by itself (code 0) once the queue
    is empty."""
    items = [case(f"c{i}") for i in range(5)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", items, adapter=demo_adapter(run_ms=50)))
    env = {**os.environ, **settings_env(fleet.settings), "TUNEFLEET_LOG_FORMAT": "json"}
    argv = [sys.executable, "-m", "workers", "--concurrency", "2", "--burst"]
    worker = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fleet.workers.append(worker)
    await wait_until(lambda: worker.poll() is not None, 60, "the burst worker to exit")
    assert worker.returncode == 0
    assert sorted(r.state for r in fleet.results().values()) == ["completed"] * len(items)
