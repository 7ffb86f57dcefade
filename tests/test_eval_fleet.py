"""Evaluations on a real fleet: real worker processes, real Redis, a worker SIGKILLed mid-evaluation,
the held-out split run end to end by the daemon, and the HTTP API over the results."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from rich.console import Console

from service.api.app import create_app
from service.cli.demo import print_held_out
from service.client.client import TunefleetClient
from service.core.io.files import read_model
from service.core.models.case import Case
from service.core.models.jobs import CASE_FUNCTION, CaseJob
from service.core.models.records import Feedback, RunRecord
from service.daemon.main import Daemon
from service.kinds.evals.names import final_eval_id, initial_eval_id
from service.kinds.evals.report import REPORT_FILE
from service.kinds.evals.results import read_results
from service.kinds.evals.split import held_out_ids
from service.kinds.evals.store import EvalStore
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import (
    Fleet,
    case,
    case_folder,
    demo_adapter,
    wait_until,
    write_tuning,
)

SLOW = demo_adapter(run_ms=700, analyze_ms=100, apply_ms=50)
EVAL_CASES = [
    case("passes"),
    case("also-passes"),
    case("misses-a-rule", rules=["nobody-adds-this"]),
    case("misses-two", rules=["x-1", "x-2"]),
    case("void-first", voids={"nomem-1": 1}),
    case("flawed", flawed=True),
]
REPEATS = 3


def item_events(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [e for e in fleet.events() if e["kind"] == kind]


def item_key(event: dict[str, Any]) -> tuple[str, int]:
    return event["case"], event["data"]["repeat"]


def graded_notes(item_root: Path) -> list[dict[str, Any]]:
    notes = item_root / "notes.jsonl"
    lines = notes.read_text().splitlines() if notes.exists() else []
    return [n for n in map(json.loads, lines) if n["kind"] == "graded"]


async def test_an_evaluation_survives_a_killed_worker_and_grades_each_item_once(
    fleet: Fleet, tmp_path: Path
) -> None:
    """6 cases x 3 repeats on two real workers, one SIGKILLed while it holds items: every item ends once,
    its folder holds one run and the one grade that names it (and the void try set aside, for the case
    whose first run is void), and the pass rate equals the one counted by hand from the folders."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [], adapter=SLOW))
    folder = case_folder(tmp_path / "eval-cases", EVAL_CASES)
    async with fleet.client() as client:
        spec = await client.evals.create("t1", cases=folder, repeats=REPEATS, name="e1")
    store = EvalStore(fleet.settings.store / "evals" / "e1")
    total = len(EVAL_CASES) * REPEATS
    assert spec.total == total
    doomed = fleet.start_worker(concurrency=4)
    survivor = fleet.start_worker(concurrency=4)

    def doomed_holds_an_unfinished_item() -> bool:
        ended = {item_key(e) for e in item_events(fleet, "eval_item_ended")}
        mine = [e for e in item_events(fleet, "eval_item_started") if e["worker"].endswith(f":{doomed.pid}")]
        return bool(ended) and any(item_key(e) not in ended for e in mine)

    await wait_until(doomed_holds_an_unfinished_item, 60, "the doomed worker to hold an unfinished item")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    await wait_until(lambda: read_results(store).done == total, 120, "every item to end")

    results = read_results(store)
    assert (results.done, results.failed, results.cancelled) == (total, 0, 0)
    ended = Counter(item_key(e) for e in item_events(fleet, "eval_item_ended"))
    assert max(ended.values()) == 1, "an item was recorded twice"
    started = Counter(item_key(e) for e in item_events(fleet, "eval_item_started"))
    assert any(n > 1 for n in started.values()), "no item was taken again after the kill"
    assert survivor.poll() is None

    passed = graded = 0
    for ref, repeat in spec.items():
        item = store.item(ref.id, ref.rev, repeat)
        run = read_model(item.paths.run, RunRecord)
        feedback = read_model(item.paths.feedback, Feedback)
        assert run is not None and feedback is not None, (ref.id, repeat)
        assert feedback.run_seal == run.seal and run.version == spec.version
        assert not run.memory_in and not (item.root / "apply.json").exists()
        notes = graded_notes(item.root)
        assert len(notes) == 1 and notes[0]["verdict"] == feedback.verdict, (ref.id, repeat, notes)
        expected_voids = 1 if ref.id == "void-first" and repeat == 1 else 0
        assert len(item.voids()) == expected_voids, (ref.id, repeat)
        outcome = item.outcome()
        assert outcome is not None and outcome.verdict == feedback.verdict
        graded += 1
        passed += feedback.verdict == "pass"
    assert (results.graded, results.passed) == (graded, passed)
    assert results.rate.rate == passed / graded
    assert passed == 3 * REPEATS  # passes, also-passes, void-first
    assert {row.case: row.outcome for row in results.cases} == {
        "passes": "pass",
        "also-passes": "pass",
        "void-first": "pass",
        "misses-a-rule": "fail",
        "misses-two": "fail",
        "flawed": "fail",
    }
    assert results.voids == 1


SHARED = [case(f"c{i}", rules=["shared"]) for i in range(7)] + [case("easy")]


async def test_held_out_cases_are_never_tuned_on_and_the_report_compares_before_and_after(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With `holdout: {fraction: 0.25}` the daemon runs the tuning on the train cases only: no held-out
    case is ever run as a case, analyzed for edits or applied (no case folder, no apply, no commit names
    it); the imported version is evaluated before, the final version after, and REPORT.md shows the
    held-out cases gained by the rule the train cases' applies added."""
    tuning_file = write_tuning(
        tmp_path / "t",
        SHARED,
        adapter=demo_adapter(run_ms=50, analyze_ms=20, apply_ms=20),
        holdout={"fraction": 0.25, "seed": 3},
    )
    daemon = fleet.start_daemon(tuning_file)
    store = fleet.settings.store / "tunings" / "t1"
    await wait_until(lambda: (store / "holdout.json").exists(), 30, "the split to be drawn")
    fleet.start_worker(concurrency=4)
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: (store / REPORT_FILE).exists(), 120, "the report")
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(30)

    async with fleet.client() as client:
        held = held_out_ids(client.tuning_store("t1"))
    assert len(held) == 2
    cases_run = {p.name for p in (store / "cases").iterdir()}
    assert cases_run == {c["id"] for c in SHARED} - held
    for event in fleet.events():
        if event.get("case") in held:
            assert "eval" in event.get("data", {}), event  # only evaluation items ever touch it
            assert event.get("step") != "apply" and event["kind"] not in ("case_started", "case_queued")
    log = subprocess.run(
        ["git", f"--git-dir={store / 'system.git'}", "log", "--format=%B", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(f":{case_id}:" not in log and f"/{case_id}/" not in log for case_id in held)
    evals = fleet.settings.store / "evals"
    assert not list(evals.glob("*/items/*/*/apply.json"))

    before = read_results(EvalStore(evals / initial_eval_id("t1")))
    after = read_results(EvalStore(evals / final_eval_id("t1")))
    held_rows_before = {r.case: r.outcome for r in before.cases}
    held_rows_after = {r.case: r.outcome for r in after.cases}
    assert set(held_rows_before) == set(held_rows_after) == held
    assert before.version != after.version
    for case_id in held:
        expected_before = "pass" if case_id == "easy" else "fail"
        assert (held_rows_before[case_id], held_rows_after[case_id]) == (expected_before, "pass")
    report = (store / REPORT_FILE).read_text()
    assert "## Held-out cases, before and after" in report and "Exact McNemar test" in report
    assert "No edit was published" not in report  # the final version is a new one
    assert "| tuning (train cases) |" in report and "| evaluation (held-out, before and after) |" in report
    printed = tunefleet("report", "t1", env=fleet_env(fleet.settings))
    assert printed.returncode == 0 and printed.stdout == report


async def test_the_api_creates_reads_and_compares_evaluations(fleet: Fleet, tmp_path: Path) -> None:
    """Over HTTP: bad input is a 422 with the error line and queues nothing; a good request is 201 with
    the spec; the results, the progress and a comparison are served once workers ran the items; the
    report is served as Markdown and JSON."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", EVAL_CASES[:3], adapter=demo_adapter()))
    token = "tf-eval-write-77"
    settings = fleet.settings.model_copy(update={"api_token": SecretStr(token), "api_public_read": True})
    auth = {"Authorization": f"Bearer {token}"}
    async with TunefleetClient(settings) as client:
        app = create_app(client, settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api:
            refused = await api.post("/api/tunings/t1/evals", json={"repeats": 0}, headers=auth)
            assert refused.status_code == 422 and refused.json()["fields"][0]["field"] == "repeats"
            assert (await api.post("/api/tunings/t1/evals", json={}, headers={})).status_code == 401
            assert (await api.get("/api/evals")).json() == {"evals": []}
            made = await api.post(
                "/api/tunings/t1/evals", json={"name": "a", "version": "initial"}, headers=auth
            )
            assert made.status_code == 201 and made.json()["id"] == "a"
            again = await api.post("/api/tunings/t1/evals", json={"name": "b", "repeats": 2}, headers=auth)
            assert again.status_code == 201
            fleet.start_worker(concurrency=4)

            async def listed_finished() -> bool:
                # the listing reads the live counters, which an item's end event moves just after its
                # outcome is written: wait on what the listing says, not on the store
                listing = (await api.get("/api/evals")).json()["evals"]
                return [e["status"] for e in listing] == ["finished", "finished"]

            await wait_until(listed_finished, 60, "both evaluations listed as ended")
            stored = [read_results(EvalStore(settings.store / "evals" / e)).status for e in "ab"]
            assert stored == ["finished", "finished"]
            listed = (await api.get("/api/evals")).json()["evals"]
            assert [(e["head"]["id"], e["status"], e["passed"]) for e in listed] == [
                ("a", "finished", 2),
                ("b", "finished", 4),
            ]
            shown = (await api.get("/api/evals/b")).json()
            assert shown["rate"]["passed"] == 4 and shown["rate"]["graded"] == 6
            compared = (await api.get("/api/evals/a/compare/b")).json()
            assert (compared["pairs"], compared["gained"], compared["lost"], compared["mcnemar_p"]) == (
                3,
                0,
                0,
                1.0,
            )
            assert (await api.get("/api/evals/nope")).status_code == 404
            report = await api.get("/api/tunings/t1/report")
            assert report.status_code == 200 and report.text.startswith("# Tuning t1: report")
            assert (await api.get("/api/tunings/t1/report.json")).json()["split"] is None
            metrics = (await api.get("/metrics")).text
            assert 'tunefleet_eval_items_total{outcome="pass",tuning="t1"} 6.0' in metrics
            assert 'tunefleet_evals{status="finished"} 2.0' in metrics


async def test_the_demo_demands_a_held_out_gain_only_of_a_tuning_whose_cases_declare_outcomes(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A tuning that changes nothing (every case passes at once) is measured before and after with the
    same pass rate: the demo's verdict fails it when its cases declare their outcomes (the simulated
    demo must improve) and passes it when they do not (a real model's demo shows both figures); both the
    demo's table and REPORT.md say that no edit was published, so the two measures are the same version's."""
    tuning_file = write_tuning(
        tmp_path / "t",
        [case(f"e{i}") for i in range(4)],
        adapter=demo_adapter(run_ms=10, analyze_ms=10, apply_ms=10),
        holdout={"fraction": 0.5, "seed": 1},
    )
    daemon = fleet.start_daemon(tuning_file)
    store = fleet.settings.store / "tunings" / "t1"
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: (store / REPORT_FILE).exists(), 120, "the report")
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(30)
    shown = io.StringIO()
    console = Console(file=shown, width=200)
    async with fleet.client() as client:
        assert print_held_out(console, client, "t1", must_improve=True) == 1
        assert print_held_out(console, client, "t1", must_improve=False) == 0
    text = shown.getvalue()
    assert "before" in text and "after" in text and "did not do better" in text
    assert "No edit was published: the final version is the imported one" in " ".join(text.split())
    assert "No edit was published" in (store / REPORT_FILE).read_text()


async def test_a_worker_refuses_to_run_a_held_out_case_queued_past_the_submission(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A held-out case's job put in the queue by hand (past the submission's check) is never run: the
    worker ends it failed, naming why, with no try in its folder."""
    tuning_file = write_tuning(tmp_path / "t", SHARED, holdout={"fraction": 0.25, "seed": 3})
    await fleet.start_tuning(tuning_file)
    async with fleet.client() as client:
        held = sorted(held_out_ids(client.tuning_store("t1")))[0]
        store = client.tuning_store("t1").case(held, 1)
        store.write_case(Case.model_validate(next(c for c in SHARED if c["id"] == held)))
        job = CaseJob(tuning="t1", case=held, rev=1)
        await client.redis.enqueue_job(CASE_FUNCTION, job.model_dump(), _job_id=job.job_id)
    fleet.start_worker(concurrency=4)
    rows = await fleet.wait_finished(len(SHARED) - 1)
    assert rows[held].state == "failed" and "is held out of tuning 't1'" in (rows[held].reason or "")
    assert not (store.root / "nomem").exists()
    as_a_case = [e for e in fleet.events() if e.get("case") == held and "eval" not in e.get("data", {})]
    assert [e["kind"] for e in as_a_case if e["kind"] == "step_started"] == []


async def test_an_evaluation_runs_the_version_it_asked_for_not_the_current_one(
    fleet: Fleet, tmp_path: Path
) -> None:
    """After tuning published the rule a case needs, an evaluation of `initial` still runs the imported
    commit (the case fails there), and one of `main` the published one (it passes)."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("needs-r", rules=["r"])]))
    fleet.start_worker(concurrency=4)
    await fleet.wait_finished(1)
    async with fleet.client() as client:
        before = await client.evals.create("t1", version="initial", name="before")
        after = await client.evals.create("t1", version="main", name="after")
    assert before.version != after.version
    stores = {name: EvalStore(fleet.settings.store / "evals" / name) for name in ("before", "after")}
    await wait_until(lambda: all(read_results(s).done == 1 for s in stores.values()), 60, "both to end")
    for name, spec, verdict in (("before", before, "fail"), ("after", after, "pass")):
        item = stores[name].item("needs-r", 1, 1)
        run = read_model(item.paths.run, RunRecord)
        assert run is not None and run.version == spec.version
        assert read_results(stores[name]).cases[0].outcome == verdict


async def test_an_item_void_three_times_fails_for_infrastructure_and_is_left_out(
    fleet: Fleet, tmp_path: Path
) -> None:
    """An item whose runs are void three times in a row ends `failed`, its three tries set aside; it is
    listed apart and left out of the pass rate, and a repeat whose first run alone is void is graded."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    broken = case("broken", voids={"nomem-1": 5, "nomem-2": 1})
    folder = case_folder(tmp_path / "cases", [broken, case("fine")])
    async with fleet.client() as client:
        await client.evals.create("t1", cases=folder, repeats=2, name="e1")
    store = EvalStore(fleet.settings.store / "evals" / "e1")
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: read_results(store).done == 4, 60, "every item to end")
    results = read_results(store)
    assert (results.graded, results.passed, results.failed, results.voids) == (3, 3, 1, 4)
    assert [(f.case, f.repeat) for f in results.infra] == [("broken", 1)]
    assert "3 void runs in a row" in (results.infra[0].reason or "")
    assert [p.name for p in store.item("broken", 1, 1).voids()] == ["1.void-1", "1.void-2", "1.void-3"]
    assert results.rate.rate == 1.0
    rows = {row.case: (row.graded, row.failed, row.outcome) for row in results.cases}
    assert rows == {"broken": (1, 1, "pass"), "fine": (2, 0, "pass")}


async def test_cancelling_an_evaluation_ends_its_running_and_queued_items(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`eval cancel` ends the items queued at once and those running within a poll, all `cancelled`,
    none graded after it; the worker goes on."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [], adapter=demo_adapter(run_ms=3000)))
    folder = case_folder(tmp_path / "cases", [case(f"c{i}") for i in range(4)])
    async with fleet.client() as client:
        await client.evals.create("t1", cases=folder, repeats=3, name="e1")
    store = EvalStore(fleet.settings.store / "evals" / "e1")
    worker = fleet.start_worker(concurrency=2)
    await wait_until(lambda: len(item_events(fleet, "eval_item_started")) >= 2, 60, "items to start")
    async with fleet.client() as client:
        assert await client.evals.cancel("e1") == 12
    await wait_until(lambda: read_results(store).done == 12, 30, "every item to end")
    results = read_results(store)
    assert (results.status, results.cancelled, results.graded) == ("cancelled", 12, 0)
    reasons = {c.reason for c in store.scan().outcomes.values()}
    assert reasons == {"cancelled before it started", "cancelled by the user"}, reasons
    assert worker.poll() is None


async def test_a_tuning_at_its_budget_holds_its_evaluation_items_until_resumed(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The tuning's budget counts what its cases and evaluations spent: items queued once it is spent
    wait at their run start, held, with no step started; `resume TUNING` lets them be graded."""
    tuning_file = write_tuning(
        tmp_path / "t", [case("spender", tokens=1000)], budget={"tuning_max_tokens": 1500}
    )
    await fleet.start_tuning(tuning_file)
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: bool(item_events(fleet, "tuning_held")), 30, "the tuning to be held")
    async with fleet.client() as client:
        await client.evals.create("t1", split="all", repeats=2, name="e1")
    await wait_until(
        lambda: (
            len(
                [
                    e
                    for e in fleet.events()
                    if e["kind"] == "run_waits_for_hold" and "eval" in e.get("data", {})
                ]
            )
            == 2
        ),
        30,
        "both items to wait for the hold",
    )
    store = EvalStore(fleet.settings.store / "evals" / "e1")
    assert read_results(store).done == 0
    assert not [e for e in fleet.events() if e["kind"] == "step_started" and "eval" in e.get("data", {})]
    async with fleet.client() as client:
        assert await client.resume("t1")
    await wait_until(lambda: read_results(store).done == 2, 30, "both items to end")
    assert read_results(store).graded == 2


async def ended_in_redis(client: TunefleetClient, eval_id: str) -> int:
    """How many items of the evaluation Redis counts as ended (graded, either way, or cancelled)."""
    [progress] = [p for p in await client.evals.progress() if p.head.id == eval_id]
    return progress.passed + progress.failed_grade + progress.cancelled


async def test_after_redis_lost_everything_the_daemon_puts_evaluations_back(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With Redis emptied (FLUSHALL), the daemon's restore gives back each evaluation's head and counters
    from the store, and enqueues its unfinished items again: status shows the same progress, and the
    evaluation ends."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a"), case("b", rules=["never"])]))
    async with fleet.client() as client:
        await client.evals.create("t1", split="all", repeats=2, name="done")
        await client.evals.create("t1", split="all", repeats=2, name="later")
        await client.evals.cancel("later")  # its items end here: nothing of it needs a worker
        await client.evals.create("t1", split="all", repeats=2, name="pending")
    store = fleet.settings.store / "evals"
    worker = fleet.start_worker(concurrency=4)
    await wait_until(lambda: read_results(EvalStore(store / "done")).done == 4, 30, "the first to end")
    async with fleet.client() as client:  # its counters in Redis follow its results in the store
        began = time.monotonic()
        while (await ended_in_redis(client, "done")) < 4:
            assert time.monotonic() - began < 30, "Redis never counted the first's 4 items"
            await asyncio.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    async with fleet.client() as client:
        before = {p.head.id: (p.passed, p.failed_grade, p.cancelled) for p in await client.evals.progress()}
        await client.redis.flushall()
        assert await client.evals.progress() == []
        assert await Daemon(client).recover_if_lost()
        after = {p.head.id: (p.passed, p.failed_grade, p.cancelled) for p in await client.evals.progress()}
    assert after["done"] == before["done"] == (2, 2, 0)
    assert after["later"] == before["later"] == (0, 0, 4)
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: read_results(EvalStore(store / "pending")).done == 4, 30, "the last to end")


async def test_an_item_whose_case_cannot_be_read_ends_failed_naming_the_file(
    fleet: Fleet, tmp_path: Path
) -> None:
    """An item whose kept case file is gone ends `failed` for infrastructure, its reason naming the file,
    and the evaluation still ends with the other items graded."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a"), case("b")]))
    async with fleet.client() as client:
        await client.evals.create("t1", split="all", name="e1")
    store = EvalStore(fleet.settings.store / "evals" / "e1")
    (store.cases_dir / "b.json").unlink()
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: read_results(store).done == 2, 30, "both items to end")
    results = read_results(store)
    assert (results.graded, results.failed) == (1, 1)
    (failure,) = results.infra
    assert failure.case == "b" and "the eval_item could not be loaded" in (failure.reason or "")
    assert str(store.cases_dir / "b.json") in (failure.reason or "")
