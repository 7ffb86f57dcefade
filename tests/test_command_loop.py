"""The loop with command adapters: real agent subprocesses following the contract, in real workers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from service.core.io.files import read_model
from service.core.models.records import RunRecord
from tests.support.fleet import Fleet, demo_adapter, wait_until, write_tuning

AGENT = str(Path(__file__).parent / "agents" / "contract_agent.py")
R1_CASE = {"id": "c1", "rev": 1, "input": "say hello", "rubric": [{"id": "r1", "text": "says hello"}]}


def agent(mode: str, step: str, **extra: Any) -> dict[str, Any]:
    args = {
        "run": ["run", "--input", "{input}", "--output", "{output}", "--memory", "{memory}"],
        "analyze": ["analyze", "--run", "{run}", "--feedback", "{feedback}", "--analysis", "{analysis}"],
        "apply": ["apply", "--worktree", "{worktree}", "--output", "{output}"],
    }[step]
    return {
        "kind": "command",
        "argv": [sys.executable, AGENT, "--mode", mode, *args],
        "timeout_s": 20,
        **extra,
    }


def inline(code: str, *args: str) -> dict[str, Any]:
    """A command adapter running `code` (braces escaped for the argv template)."""
    escaped = code.replace("{", "{{").replace("}", "}}")
    return {"kind": "command", "argv": [sys.executable, "-c", escaped, *args], "timeout_s": 20}


async def start_one_case(fleet: Fleet, tmp_path: Path, **roles: dict[str, Any]) -> None:
    """Register a tuning of one case (the contract agent in every role unless overridden); start a worker."""
    adapters = {
        "runner": agent("normal", "run"),
        "analyzer": agent("normal", "analyze"),
        "applier": agent("normal", "apply"),
        **roles,
    }
    await fleet.start_tuning(write_tuning(tmp_path / "t", [R1_CASE], name="t1", **adapters))
    fleet.start_worker()


def case_root(fleet: Fleet) -> Path:
    return fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1"


async def test_command_agents_run_a_case_to_completion(fleet: Fleet, tmp_path: Path) -> None:
    """Runner, analyzer and applier as real subprocesses: the case passes and its agent output is kept."""
    await start_one_case(fleet, tmp_path)
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
    run = read_model(case_root(fleet) / "nomem" / "1" / "run.json", RunRecord)
    assert run is not None and run.exit_code == 0 and run.output.answer == "done: say hello"
    assert "working on case c1" in (case_root(fleet) / "nomem" / "1" / run.work / "run.log").read_text()
    assert (case_root(fleet) / "nomem" / "1" / "analysis.md").read_text().startswith("# Analysis")


VOID_IF_TIMED_OUT = """
import json, sys
run = json.load(open(sys.argv[1]))
fb = {"verdict": "void", "done": False, "infra": "the runner hung: " + run["output"]["error"]}
if not run["timed_out"]:
    fb = {"verdict": "pass", "done": True, "rubric": {"r1": 1.0}}
json.dump(fb, open(sys.argv[2], "w"))
"""


async def test_a_hung_runner_is_killed_at_its_timeout_and_graded_and_the_analyzer_may_call_it_void(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A runner that never exits is killed at its timeout and its run graded; an analyzer that calls a
    timed-out run void (infrastructure) has it set aside, and three such voids make the case failed."""
    await start_one_case(
        fleet,
        tmp_path,
        runner=agent("hang", "run", timeout_s=0.5),
        analyzer=inline(VOID_IF_TIMED_OUT, "{run}", "{feedback}"),
    )
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "failed"
    assert rows["c1"].reason == "3 void runs in a row, the last: the runner hung: timed out after 0.5 s"
    assert sorted(p.name for p in (case_root(fleet) / "nomem").iterdir()) == [
        "1.void-1",
        "1.void-2",
        "1.void-3",
    ]
    run = read_model(case_root(fleet) / "nomem" / "1.void-3" / "run.json", RunRecord)
    assert run is not None and run.timed_out and run.void is None


async def test_the_sandbox_exit_code_opens_the_breaker_and_marks_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The sandbox exit code records no run, opens the fleet's breaker, and leaves the case unmarked."""
    await start_one_case(fleet, tmp_path, runner=agent("sandbox", "run"))
    await wait_until(
        lambda: any(e["kind"] == "breaker_opened" for e in fleet.events()), 20, "the breaker to open"
    )
    opened = next(e for e in fleet.events() if e["kind"] == "breaker_opened")
    assert "runner exited 75" in opened["detail"]
    assert not list(case_root(fleet).glob("nomem/*/run.json"))
    assert fleet.results()["c1"].state == "unfinished"


async def test_an_analyzer_writing_invalid_feedback_fails_the_case_naming_file_and_field(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Feedback that breaks the schema (twice) ends the case failed naming the file and the field."""
    await start_one_case(fleet, tmp_path, analyzer=agent("bad-json", "analyze"))
    rows = await fleet.wait_finished(1)
    reason = rows["c1"].reason or ""
    assert rows["c1"].state == "failed"
    assert "feedback.json" in reason and "field 'verdict'" in reason


EDITING_ANALYZER = """
import json, pathlib, sys
pathlib.Path(sys.argv[1], "rules.md").write_text("- rule: sneaky\\n")
json.dump({"verdict": "pass", "done": True, "rubric": {"r1": 1.0}}, open(sys.argv[2], "w"))
"""


async def test_an_analysis_that_edits_the_system_is_reported_and_discarded(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The analyzer only gets a private copy: its edit is reported as an event and never reaches a version."""
    await start_one_case(fleet, tmp_path, analyzer=inline(EDITING_ANALYZER, "{system}", "{feedback}"))
    await fleet.wait_finished(1)
    edited = [e for e in fleet.events() if e["kind"] == "analysis_edited_system"]
    assert len(edited) == 2  # one per analysis (nomem/1 and mem/1)
    snapshots = fleet.settings.store / "tunings" / "t1" / "snapshots"
    assert all("sneaky" not in (s / "rules.md").read_text() for s in snapshots.iterdir() if s.is_dir())


FAIL_THEN_PASS = """
import json, sys
attempt, phase, out = sys.argv[1], sys.argv[2], sys.argv[3]
if attempt == "1" and phase == "nomem":
    fb = {"verdict": "fail", "done": False, "rubric": {"r1": 0.0},
          "improvements": [{"target": "prose", "change": "add a greeting skill"}]}
else:
    fb = {"verdict": "pass", "done": True, "rubric": {"r1": 1.0}}
json.dump(fb, open(out, "w"))
"""
SKILL_APPLIER = """
import json, pathlib, sys
pathlib.Path(sys.argv[1], "skills").mkdir(exist_ok=True)
pathlib.Path(sys.argv[1], "skills", "greeting.md").write_text("greet first")
json.dump({"skills": ["greeting"], "summary": "added the greeting skill"}, open(sys.argv[2], "w"))
"""


async def test_a_run_that_misses_the_skills_of_the_last_apply_records_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Skills made by the previous apply but not loaded by the run are recorded and told to the analyzer."""
    await start_one_case(
        fleet,
        tmp_path,
        analyzer=inline(FAIL_THEN_PASS, "{attempt}", "{phase}", "{feedback}"),
        applier=inline(SKILL_APPLIER, "{worktree}", "{output}"),
    )
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
    second = read_model(case_root(fleet) / "nomem" / "2" / "run.json", RunRecord)
    assert second is not None and second.missed_skills == ["greeting"]
    brief = next((case_root(fleet) / "nomem" / "2").glob("analyze-*/in/brief.json"))
    assert json.loads(brief.read_text())["missed_skills"] == ["greeting"]


async def test_demo_and_command_adapters_mix_in_one_tuning(fleet: Fleet, tmp_path: Path) -> None:
    """A demo runner with a command analyzer: adapters are chosen per role."""
    await start_one_case(fleet, tmp_path, runner=demo_adapter(), applier=demo_adapter())
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
