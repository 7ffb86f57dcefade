"""Seed semantics for real agents: what is infrastructure (void, failed) and what is a try (graded).

Real worker processes, real Redis and real agent subprocesses: a runner that cannot start or leaves
no output is void; one that hangs is graded; a runner reporting its sandbox down with nothing to
probe ends its case after `max_sandbox_trips`; daemon starts re-run a failed case a bounded number of
times; unknown rubric ids are dropped with a note; an analyzer that timed out is not asked twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from service.core.io.files import read_model
from service.core.models.records import Feedback, Note, RunRecord
from tests.support.fleet import Fleet, write_tuning
from tests.test_command_loop import R1_CASE, agent, case_root, inline


async def start_case(fleet: Fleet, tmp_path: Path, start_worker: bool = True, **config: Any) -> Path:
    """Register a tuning of one case (the contract agent in every role unless `config` says otherwise);
    start a worker unless told not to; the tuning file."""
    body = {
        "runner": agent("normal", "run"),
        "analyzer": agent("normal", "analyze"),
        "applier": agent("normal", "apply"),
        **config,
    }
    tuning_file = write_tuning(tmp_path / "t", [R1_CASE], name="t1", **body)
    await fleet.start_tuning(tuning_file)
    if start_worker:
        fleet.start_worker()
    return tuning_file


def folders(fleet: Fleet, phase: str = "nomem") -> list[str]:
    return sorted(p.name for p in (case_root(fleet) / phase).iterdir() if p.is_dir())


def log_events(fleet: Fleet, n: int = 0) -> list[dict[str, Any]]:
    """The worker's structured log lines."""
    return [json.loads(line) for line in fleet.log_of(n).splitlines() if line.startswith("{")]


GRADE_TIMED_OUT = """
import json, sys
brief = json.load(open(sys.argv[1]))
run = brief["run"]
if run["timed_out"] and "starting in mode hang" in (run["log_tail"] or ""):
    json.dump({"verdict": "pass", "done": True, "rubric": {"r1": 1.0}, "summary": "slow but right"},
              open(sys.argv[2], "w"))
"""


async def test_a_hung_runner_is_graded_with_its_log_tail_and_the_analyzer_decides(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A runner killed at its timeout made a run: recorded as timed out with the end of its log, shown to
    the analyzer, whose verdict decides (here a pass: the case completes, nothing is set aside)."""
    await start_case(
        fleet,
        tmp_path,
        runner=agent("hang", "run", timeout_s=0.5),
        analyzer=inline(GRADE_TIMED_OUT, "{brief}", "{feedback}"),
    )
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed", rows["c1"].reason
    assert folders(fleet) == ["1"] and folders(fleet, "mem") == ["1"]
    run = read_model(case_root(fleet) / "nomem" / "1" / "run.json", RunRecord)
    assert run is not None and run.void is None and run.timed_out
    assert run.output.error == "timed out after 0.5 s"
    assert run.log_tail is not None and "starting in mode hang" in run.log_tail
    feedback = read_model(case_root(fleet) / "nomem" / "1" / "feedback.json", Feedback)
    assert feedback is not None and feedback.summary == "slow but right"


async def test_a_runner_that_cannot_start_is_void_until_max_voids_end_the_case(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A runner whose program cannot be started (exit 127) is a void run, set aside without analysis;
    `max_voids` of them in a row end the case failed with that reason."""
    missing = str(tmp_path / "no-such-agent")
    runner = {"kind": "command", "argv": [missing, "{input}", "{output}"], "timeout_s": 20}
    await start_case(fleet, tmp_path, runner=runner, max_voids=2)
    rows = await fleet.wait_finished(1)
    reason = rows["c1"].reason or ""
    assert rows["c1"].state == "failed"
    assert reason.startswith(f"2 void runs in a row, the last: runner could not start: {missing}: "), reason
    assert folders(fleet) == ["1.void-1", "1.void-2"]
    run = read_model(case_root(fleet) / "nomem" / "1.void-1" / "run.json", RunRecord)
    assert run is not None and run.exit_code == 127 and (run.void or "").startswith("runner could not start")
    assert not any(e["kind"] == "step_started" and e["step"] == "analyze" for e in fleet.events())


async def test_a_runner_that_exits_without_output_is_void(fleet: Fleet, tmp_path: Path) -> None:
    """A runner that exits without writing its output file is void (infrastructure), its reason quoting
    the exit code and the last log line, and its log tail kept; voids in a row end the case failed."""
    await start_case(fleet, tmp_path, runner=agent("crash", "run"), max_voids=2)
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "failed"
    last = "runner exited 3 without writing output.json: agent: something broke"
    assert rows["c1"].reason == f"2 void runs in a row, the last: {last}"
    run = read_model(case_root(fleet) / "nomem" / "1.void-2" / "run.json", RunRecord)
    assert run is not None and run.void == last and "agent: something broke" in (run.log_tail or "")


async def test_a_runner_reporting_its_sandbox_down_with_nothing_to_probe_ends_failed(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Under `sandbox: none` without a probe, a runner that keeps exiting with the sandbox code ends its
    case failed once it reported the sandbox down more than `max_sandbox_trips` times, in bounded time."""
    began = time.monotonic()
    await start_case(fleet, tmp_path, runner=agent("sandbox", "run"), max_sandbox_trips=2)
    rows = await fleet.wait_finished(1, timeout_s=30)
    assert time.monotonic() - began < 30
    assert rows["c1"].state == "failed"
    assert rows["c1"].reason == "the runner reported its sandbox down 3 times with no sandbox to probe"
    downs = [e for e in fleet.events() if e["kind"] == "run_sandbox_down"]
    assert len(downs) == 3
    assert not list(case_root(fleet).glob("nomem/*/run.json"))


async def test_the_sandbox_trips_of_a_case_survive_a_restart(fleet: Fleet, tmp_path: Path) -> None:
    """The trips are counted in the case's folder: a worker that takes the case over goes on from the
    count an earlier one left (two here), so one more report past the limit ends it."""
    await start_case(fleet, tmp_path, start_worker=False, runner=agent("sandbox", "run"), max_sandbox_trips=2)
    (case_root(fleet) / "sandbox-trips.json").write_text(json.dumps({"trips": 2}))
    fleet.start_worker()
    rows = await fleet.wait_finished(1, timeout_s=30)
    assert rows["c1"].reason == "the runner reported its sandbox down 3 times with no sandbox to probe"
    assert len([e for e in fleet.events() if e["kind"] == "run_sandbox_down"]) == 1


async def test_daemon_starts_rerun_a_failed_case_a_bounded_number_of_times_and_submit_always(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With `max_failed_reruns: 1`, the next daemon start re-runs a failed case and the one after does
    not; `tunefleet submit` re-runs it all the same."""
    tuning_file = await start_case(
        fleet, tmp_path, runner=agent("crash", "run"), max_voids=1, max_failed_reruns=1
    )

    def requeued() -> int:
        return sum(e["kind"] == "case_requeued" for e in fleet.events())

    assert (await fleet.wait_finished(1))["c1"].state == "failed"
    await fleet.start_tuning(tuning_file)
    assert requeued() == 1 and (case_root(fleet) / "failed-1.json").exists()
    assert (await fleet.wait_finished(1))["c1"].state == "failed"
    await fleet.start_tuning(tuning_file)
    assert requeued() == 1 and not (case_root(fleet) / "failed-2.json").exists()
    assert fleet.results()["c1"].state == "failed"
    async with fleet.client() as client:
        report = await client.submit_path("t1", tmp_path / "t" / "cases")
    assert report.accepted == ["c1@1"]
    assert requeued() == 2 and (case_root(fleet) / "failed-2.json").exists()
    assert (await fleet.wait_finished(1))["c1"].state == "failed"


UNKNOWN_RUBRIC_ID = """
import json, sys
json.dump({"verdict": "pass", "done": True, "rubric": {"r1": 1.0, "bogus": 0.5}}, open(sys.argv[1], "w"))
"""


async def test_an_unknown_rubric_id_is_dropped_with_a_note_and_the_case_goes_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A score for an id the case's rubric lacks is dropped, not fatal: the recorded feedback holds the
    known ids only, the case gets a `dropped` note, the worker logs it, and the case completes."""
    await start_case(fleet, tmp_path, analyzer=inline(UNKNOWN_RUBRIC_ID, "{feedback}"))
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed", rows["c1"].reason
    feedback = read_model(case_root(fleet) / "nomem" / "1" / "feedback.json", Feedback)
    assert feedback is not None and feedback.rubric == {"r1": 1.0}
    notes = [
        Note.model_validate_json(line) for line in (case_root(fleet) / "notes.jsonl").read_text().splitlines()
    ]
    dropped = [n for n in notes if n.kind == "dropped"]
    assert [(n.phase, n.attempt) for n in dropped] == [("nomem", 1), ("mem", 1)]
    assert "bogus" in dropped[0].text and "feedback.json" in dropped[0].text
    logged = [e for e in log_events(fleet) if e.get("event") == "feedback_rubric_dropped"]
    assert [e["ids"] for e in logged] == [["bogus"], ["bogus"]]


COUNTING_ANALYZER = """
import pathlib, sys, time
with open(sys.argv[1], "a") as starts:
    starts.write("started\\n")
if sys.argv[2] == "hang":
    time.sleep(60)
sys.exit(3 if sys.argv[2] == "exit-3" else 0)
"""


@pytest.mark.parametrize(
    ("mode", "starts", "ended"),
    [
        ("hang", 1, "(the analyzer timed out after 0.5 s)"),
        ("exit-3", 1, "(the analyzer exited 3)"),
        ("exit-0", 2, "(the analyzer exited 0)"),
    ],
)
async def test_only_an_analyzer_that_exited_0_is_asked_again(
    fleet: Fleet, tmp_path: Path, mode: str, starts: int, ended: str
) -> None:
    """An analyzer that leaves no usable feedback is asked again only if it exited 0: one that timed out
    or failed is started once, and the case ends failed naming the file and how the analyzer ended."""
    counter = tmp_path / "analyzer-starts"
    # Only the hanging analyzer meets its timeout: the others have room for a slow start on a busy machine.
    analyzer = {**inline(COUNTING_ANALYZER, str(counter), mode), "timeout_s": 0.5 if mode == "hang" else 30}
    await start_case(fleet, tmp_path, analyzer=analyzer)
    rows = await fleet.wait_finished(1)
    reason = rows["c1"].reason or ""
    assert rows["c1"].state == "failed"
    assert reason.startswith("analysis wrote no usable feedback: ") and reason.endswith(ended), reason
    assert "feedback.json: missing" in reason
    assert counter.read_text().splitlines() == ["started"] * starts
