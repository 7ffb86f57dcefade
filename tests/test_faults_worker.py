"""Workers killed, paused, stopped and poisoned: no case lost, no recorded step run twice, nothing marked
because of the fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import redis
from arq.utils import timestamp_ms

from service.core import keys
from service.core.io.arq_contact import RESUME_SHIFT_MS
from service.core.io.connection import connect
from service.core.io.files import read_model
from service.core.models.records import RunRecord
from service.core.settings import FleetSettings
from tests.support.fleet import (
    Fleet,
    case,
    demo_adapter,
    event_time_s,
    step_finishes,
    step_starts,
    wait_until,
    write_tuning,
)
from tests.support.redis_server import RedisServer
from workers.finish import Finisher, Outcome
from workers.lease import JobLease
from workers.runtime import WorkerRuntime

SLOW_RUN = demo_adapter(run_ms=2500, analyze_ms=50, apply_ms=50)


def started_by(events: list[dict[str, Any]], case_id: str, step: str = "run") -> list[dict[str, Any]]:
    return [
        e for e in events if e.get("case") == case_id and e["kind"] == "step_started" and e["step"] == step
    ]


def worker_of(proc_pid: int, events: list[dict[str, Any]]) -> set[str]:
    return {e["worker"] for e in events if e.get("worker", "").endswith(f":{proc_pid}")}


async def test_a_killed_workers_case_resumes_elsewhere_within_lease_and_poll(
    fleet: Fleet, tmp_path: Path
) -> None:
    """SIGKILL mid-run: another worker restarts the case within lease + poll; it ends as it would have."""
    # Both workers are up before the case is queued: a worker slow to start on a loaded machine cannot let
    # the first run end (and the case go on) before the kill.
    workers = [fleet.start_worker(), fleet.start_worker()]
    pids = {w.pid for w in workers}
    await wait_until(lambda: pids <= {int(w.split(":")[-1]) for w in _alive(fleet)}, 30, "both workers up")
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1", rules=["c1-a"])], adapter=SLOW_RUN))
    await wait_until(lambda: len(started_by(fleet.events(), "c1")) == 1, 30, "the first run to start")
    first = next(w for w in workers if started_by(fleet.events(), "c1")[0]["worker"].endswith(f":{w.pid}"))
    second = next(w for w in workers if w is not first)
    first.send_signal(signal.SIGKILL)
    killed_at = time.time()
    first.wait()
    assert step_finishes(fleet.events(), "c1") == {}, "the first run ended before the kill"
    await wait_until(lambda: len(started_by(fleet.events(), "c1")) == 2, 30, "the run to start again")
    again = started_by(fleet.events(), "c1")[1]
    assert again["worker"].endswith(f":{second.pid}")
    s = fleet.settings
    assert event_time_s(again) - killed_at <= s.lease_s + s.poll_delay_s + 0.5
    rows = await fleet.wait_finished(1)
    assert (rows["c1"].state, rows["c1"].reason) == ("completed", None)
    assert all(n == 1 for n in step_finishes(fleet.events(), "c1").values())


def _alive(fleet: Fleet) -> list[str]:
    with redis.Redis.from_url(fleet.settings.redis_url) as r:
        return [w.decode() for w in cast(list[bytes], r.zrange(keys.workers(), 0, -1))]


async def test_a_paused_worker_cannot_write_over_the_new_owner(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SIGSTOP past the lease, then SIGCONT: the late worker's writes are refused, its job's end leaves the
    new owner's keys alone, and the result is the new owner's."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")], adapter=SLOW_RUN))
    paused = fleet.start_worker()
    await wait_until(lambda: len(started_by(fleet.events(), "c1")) == 1, 30, "the first run to start")
    paused.send_signal(signal.SIGSTOP)
    owner = fleet.start_worker()
    await wait_until(lambda: len(started_by(fleet.events(), "c1")) == 2, 30, "the new owner's run to start")
    paused.send_signal(signal.SIGCONT)
    await wait_until(
        lambda: "finish_skipped_not_owner" in fleet.log_of(0), 30, "the late worker's job to end"
    )
    assert any(e["kind"] == "lease_lost" and e["worker"].endswith(f":{paused.pid}") for e in fleet.events())
    job_id = "case:t1:c1:1"
    # the late job ended while the new owner's 2.5 s run goes on: the owner's job must still be there
    assert fleet.results()["c1"].state == "unfinished"
    assert redis_server.exists(keys.arq_job(job_id))
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
    finishes = [e for e in fleet.events() if e["kind"] == "step_finished" and e.get("case") == "c1"]
    assert all(e["worker"].endswith(f":{owner.pid}") for e in finishes)
    run = read_model(fleet.settings.store / "tunings/t1/cases/c1/r1/nomem/1/run.json", RunRecord)
    owner_tokens = [
        e["data"]["lease"]
        for e in fleet.events()
        if e["kind"] == "case_started" and e["worker"].endswith(f":{owner.pid}")
    ]
    assert run is not None and int(run.work.split("-")[1]) == owner_tokens[-1]
    # the owner finishes its job once its result is written (the finish follows the result's event)
    await wait_until(
        lambda: (
            not redis_server.exists(keys.arq_job(job_id)) and redis_server.zcard(fleet.settings.queue) == 0
        ),
        30,
        "the owner's finish",
    )
    assert not redis_server.exists(keys.arq_in_progress(job_id))


STUBBORN_ONCE = """
import json, os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1]).parent / "first-run.pid"
if not marker.exists():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(0.2)
json.dump({"answer": "pass", "turns": 1}, open(sys.argv[2], "w"))
"""


async def test_sigterm_ends_agents_returns_the_case_and_marks_nothing(fleet: Fleet, tmp_path: Path) -> None:
    """SIGTERM mid-run: the worker ends its agent (KILL after the grace period), exits in time, and the case
    resumes on another worker with no void, no lost lease and no mark."""
    runner = {
        "kind": "command",
        "timeout_s": 60,
        "argv": [
            sys.executable,
            "-c",
            STUBBORN_ONCE.replace("{", "{{").replace("}", "}}"),
            str(fleet.settings.store / "tunings/t1/cases/c1/r1/case.json"),  # an unsandboxed agent's marker
            "{output}",
        ],
    }
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")], runner=runner))
    worker = fleet.start_worker()
    marker = fleet.settings.store / "tunings/t1/cases/c1/r1/first-run.pid"
    await wait_until(marker.exists, 30, "the stubborn agent to start")
    await wait_until(lambda: marker.read_text().strip() != "", 5, "the agent's pid")
    agent_pid = int(marker.read_text())
    worker.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    worker.wait(timeout=fleet.settings.stop_grace_s + 10)
    assert time.monotonic() - stopped_at <= fleet.settings.stop_grace_s + 3
    assert not _running(agent_pid)
    assert any(e["kind"] == "case_requeued" for e in fleet.events())
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    assert (rows["c1"].state, rows["c1"].reason) == ("completed", None)
    assert sorted(p.name for p in (marker.parent / "nomem").iterdir()) == ["1"]
    assert not any(e["kind"] == "lease_lost" for e in fleet.events())


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


async def test_a_case_that_keeps_killing_its_worker_ends_failed_as_poison(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A case whose run takes its worker down every time ends failed after max_lease_losses lost leases."""
    fleet.settings = fleet.settings.model_copy(update={"max_lease_losses": 2})
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1", kills_worker=10)]))
    for _ in range(4):
        worker = fleet.start_worker()

        def settled(w: subprocess.Popen[bytes] = worker) -> bool:
            return w.poll() is not None or fleet.results()["c1"].state != "unfinished"

        await wait_until(settled, 30, "the worker to die or the case to end")
        if fleet.results()["c1"].state != "unfinished":
            break
    row = fleet.results()["c1"]
    assert row.state == "failed" and (row.reason or "").startswith("poison: the case lost its lease 2 times")
    assert len(list((fleet.settings.store / "tunings/t1/cases/c1/r1").glob("worker-killed-*"))) == 2


async def test_a_free_slot_sees_new_cases_behind_long_running_ones(fleet: Fleet, tmp_path: Path) -> None:
    """With more long cases running than queue_read_limit, an idle worker starts a new one within a poll."""
    fleet.settings = fleet.settings.model_copy(update={"queue_read_limit": 3})
    long_cases = [case(f"long-{i}", latency_ms=60_000) for i in range(4)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", long_cases))
    busy = fleet.start_worker(concurrency=4)
    await wait_until(
        lambda: sum(len(started_by(fleet.events(), f"long-{i}")) for i in range(4)) == 4,
        30,
        "four long runs under way",
    )
    idle = fleet.start_worker(concurrency=2)
    await wait_until(lambda: any(w.endswith(f":{idle.pid}") for w in _alive(fleet)), 30, "the idle worker up")
    async with fleet.client() as client:
        from service.core.models.case import Case

        quick = Case.model_validate(case("quick"))
        submitted_at = time.time()
        assert await client.submit("t1", quick)
    await wait_until(lambda: len(started_by(fleet.events(), "quick")) >= 1, 10, "the new case to start")
    first = started_by(fleet.events(), "quick")[0]
    assert first["worker"].endswith(f":{idle.pid}")
    assert event_time_s(first) - submitted_at <= fleet.settings.poll_delay_s + 0.5
    assert busy.poll() is None


async def test_the_same_case_submitted_twice_at_once_runs_once(fleet: Fleet, tmp_path: Path) -> None:
    """Two concurrent submissions of one (tuning, case, rev) enqueue it once; it runs once; a later
    submission of the finished case enqueues nothing, and a new rev runs again."""
    import asyncio

    from service.core.models.case import Case

    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    c1 = Case.model_validate(case("c1"))
    async with fleet.client() as a, fleet.client() as b:
        outcomes = await asyncio.gather(a.submit("t1", c1), b.submit("t1", c1), a.submit("t1", c1))
    assert sorted(outcomes) == [False, False, True]
    fleet.start_worker()
    await fleet.wait_finished(1)
    assert all(n == 1 for n in step_starts(fleet.events(), "c1").values())
    async with fleet.client() as client:
        assert not await client.submit("t1", c1)
        assert await client.submit("t1", c1.model_copy(update={"rev": 2}))
    await wait_until(
        lambda: fleet.results()["c1"].rev == 2 and fleet.results()["c1"].state != "unfinished",
        30,
        "rev 2 to finish",
    )
    revs = json.loads(json.dumps([p.name for p in (fleet.settings.store / "tunings/t1/cases/c1").iterdir()]))
    assert sorted(revs) == ["r1", "r2"]
    assert os.path.exists(fleet.settings.store / "tunings/t1/cases/c1/r1/result.json")


async def test_a_retried_case_is_due_after_its_delay_not_after_its_run(
    settings: FleetSettings, redis_server: RedisServer
) -> None:
    """A case handed back through arq's Retry with its lease still held (its REQUEUE failed in a Redis
    hiccup) is due its delay from now, in the resume band, not pushed further by the time it ran."""
    redis_pool = await connect(settings)
    try:
        runtime = WorkerRuntime(settings, redis_pool, name="test:1")
        job_id = "case:t1:c1:1"
        await redis_pool.zadd(settings.queue, {job_id: timestamp_ms() - 60_000})  # claimed a minute ago
        lease, _ = await JobLease.acquire(runtime.batch, settings.queue, job_id, 30.0, "t1", runtime.name)
        assert lease is not None
        defer_ms = 500
        finisher = Finisher(runtime.batch, settings.queue, runtime.name, 60_000)
        assert await finisher.finish(job_id, lease.token, Outcome(ended=False, defer_ms=defer_ms))
        seconds, micros = await redis_pool.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        score = int(await redis_pool.zscore(settings.queue, job_id) or 0)
        assert 0 < score + RESUME_SHIFT_MS - now_ms <= defer_ms, score
        assert not await redis_pool.exists(keys.lease(job_id), keys.holder(job_id))
    finally:
        await redis_pool.aclose()


async def test_a_grade_recorded_by_a_worker_that_died_before_its_note_is_noted_once_on_resume(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A worker SIGKILLed after the first try's feedback was recorded, its graded note taken out of the notes
    (a death between the record and its note): the worker that resumes the case writes that grade's note,
    once, beside the grades it makes itself; the recorded analysis is not run again."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")], adapter=SLOW_RUN))
    first = fleet.start_worker()
    case_root = fleet.settings.store / "tunings/t1/cases/c1/r1"
    await wait_until(  # the grade lands while the memory run starts (JobRun.write_behind)
        lambda: (
            len(started_by(fleet.events(), "c1")) == 2
            and step_finishes(fleet.events(), "c1").get(("nomem", 1, "analyze")) == 1
        ),
        30,
        "the memory run to start with the first grade recorded",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    notes_file = case_root / "notes.jsonl"
    notes = [json.loads(line) for line in notes_file.read_text().splitlines()]
    assert [(n["kind"], n["phase"], n["attempt"]) for n in notes] == [("graded", "nomem", 1)]
    notes_file.write_text("")
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
    notes = [json.loads(line) for line in notes_file.read_text().splitlines()]
    assert [(n["kind"], n["phase"], n["attempt"]) for n in notes] == [
        ("graded", "nomem", 1),
        ("graded", "mem", 1),
    ]
    feedback = json.loads((case_root / "nomem/1/feedback.json").read_text())
    assert notes[0]["seal"] == feedback["seal"] and notes[0]["verdict"] == feedback["verdict"] == "pass"
    assert step_finishes(fleet.events(), "c1")[("nomem", 1, "analyze")] == 1
