"""Every rule of the case loop (docs/architecture.md), driven by the demo adapters through real
worker processes and a real Redis; each test checks the result, the attempt folders and the events."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from service.core.io.files import read_model
from service.core.models.records import ApplyRecord, CaseResult, RunRecord
from service.core.settings import FleetSettings
from tests.support.fleet import RULE_CASES, Fleet, case, step_starts, write_tuning

CASES = [*RULE_CASES, case("void-out", voids={"nomem-1": 3})]


@pytest.fixture
async def finished(fleet: Fleet, tmp_path: Path) -> Fleet:
    """The ten rule cases run to their end by two worker processes."""
    tuning = write_tuning(tmp_path / "tuning", CASES)
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=5)
    fleet.start_worker(concurrency=5)
    await fleet.wait_finished(len(CASES))
    return fleet


def case_dir(settings: FleetSettings, case_id: str) -> Path:
    return settings.store / "tunings" / "t1" / "cases" / case_id / "r1"


def folders(settings: FleetSettings, case_id: str, phase: str) -> list[str]:
    root = case_dir(settings, case_id) / phase
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


async def test_a_case_that_passes_at_once_completes_and_keeps_its_memory(finished: Fleet) -> None:
    """A first-try pass goes on to phase mem from its memory and, passing there, completes and keeps it."""
    row = finished.results()["pass"]
    assert (row.state, row.reason) == ("completed", None)
    assert folders(finished.settings, "pass", "nomem") == ["1"]
    assert folders(finished.settings, "pass", "mem") == ["1"]
    mem_run = read_model(case_dir(finished.settings, "pass") / "mem" / "1" / "run.json", RunRecord)
    assert mem_run is not None and mem_run.memory_in
    kept = finished.settings.store / "tunings" / "t1" / "memories" / "pass" / "r1" / "memory.md"
    assert kept.exists()


async def test_applies_publish_new_versions_that_the_next_try_runs_on(finished: Fleet) -> None:
    """Each failing try but the last is followed by an apply whose published version the next run uses."""
    settings = finished.settings
    assert finished.results()["two-applies"].state == "completed"
    assert folders(settings, "two-applies", "nomem") == ["1", "2", "3"]
    for attempt in (1, 2):
        applied = read_model(
            case_dir(settings, "two-applies") / "nomem" / str(attempt) / "apply.json", ApplyRecord
        )
        following = read_model(
            case_dir(settings, "two-applies") / "nomem" / str(attempt + 1) / "run.json", RunRecord
        )
        assert applied is not None and applied.version is not None and following is not None
        assert _is_ancestor(settings, applied.version, following.version)


def _is_ancestor(settings: FleetSettings, older: str, newer: str) -> bool:
    """Whether `older` is `newer` or one of its ancestors in the system repository."""
    repo = settings.store / "tunings" / "t1" / "system.git"
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "merge-base", "--is-ancestor", older, newer], check=False
    )
    return done.returncode == 0


async def test_no_pass_within_the_tries_ends_difficult_wrong(finished: Fleet) -> None:
    """A case still failing after `tries` attempts ends difficult/wrong, with no apply after the last try."""
    settings = finished.settings
    row = finished.results()["wrong"]
    assert (row.state, row.reason) == ("difficult", "wrong")
    assert folders(settings, "wrong", "nomem") == ["1", "2", "3"]
    assert not (case_dir(settings, "wrong") / "nomem" / "3" / "apply.json").exists()
    assert folders(settings, "wrong", "mem") == []


async def test_findings_only_about_the_dataset_end_difficult_specification(finished: Fleet) -> None:
    """When every improvement targets the case itself, the case ends at once as difficult: specification."""
    row = finished.results()["flawed"]
    assert row.state == "difficult" and (row.reason or "").startswith("specification: ")
    assert folders(finished.settings, "flawed", "nomem") == ["1"]
    assert not (case_dir(finished.settings, "flawed") / "nomem" / "1" / "apply.json").exists()


async def test_a_structural_apply_ends_difficult_and_changes_nothing(finished: Fleet) -> None:
    """An apply that answers `structural` ends the case difficult: structural, and publishes no version."""
    row = finished.results()["structural"]
    assert row.state == "difficult" and (row.reason or "").startswith("structural: ")
    applied = read_model(
        case_dir(finished.settings, "structural") / "nomem" / "1" / "apply.json", ApplyRecord
    )
    assert applied is not None and applied.version is None and applied.output.structural


async def test_memory_that_does_not_help_ends_difficult_memory(finished: Fleet) -> None:
    """A case that passes without memory but never with it ends difficult: memory after `mem_tries`."""
    row = finished.results()["no-memory"]
    assert (row.state, row.reason) == ("difficult", "memory")
    assert folders(finished.settings, "no-memory", "mem") == ["1", "2"]
    assert not (finished.settings.store / "tunings" / "t1" / "memories" / "no-memory").exists()


async def test_void_runs_are_set_aside_and_the_try_runs_again(finished: Fleet) -> None:
    """Void runs (injected faults, exit 137) move aside as .void-N and do not count as tries."""
    assert finished.results()["voids"].state == "completed"
    assert folders(finished.settings, "voids", "nomem") == ["1", "1.void-1", "1.void-2"]
    assert finished.results()["killed"].state == "completed"
    assert folders(finished.settings, "killed", "nomem") == ["1", "1.void-1"]
    killed = read_model(case_dir(finished.settings, "killed") / "nomem" / "1.void-1" / "run.json", RunRecord)
    assert killed is not None and killed.exit_code == 137 and killed.void


async def test_three_voids_in_a_row_end_failed_and_the_daemon_runs_it_again(
    finished: Fleet, tmp_path: Path
) -> None:
    """Three void runs in a row end the case failed (infrastructure); the daemon's next start re-runs it."""
    row = finished.results()["void-out"]
    assert row.state == "failed" and "3 void runs in a row" in (row.reason or "")
    assert folders(finished.settings, "void-out", "nomem") == ["1.void-1", "1.void-2", "1.void-3"]
    await finished.start_tuning(tmp_path / "tuning" / "tuning.yaml")
    await finished.wait_finished(len(CASES))
    assert finished.results()["void-out"].state == "completed"
    archived = case_dir(finished.settings, "void-out") / "failed-1.json"
    assert read_model(archived, CaseResult) is not None


async def test_every_step_is_an_event_and_costs_add_up(finished: Fleet) -> None:
    """Each step emits started/finished events, and a case's tokens and cost are the sum of its steps'."""
    events = finished.events()
    starts = step_starts(events, "one-apply")
    assert starts == {
        ("nomem", 1, "run"): 1,
        ("nomem", 1, "analyze"): 1,
        ("nomem", 1, "apply"): 1,
        ("nomem", 2, "run"): 1,
        ("nomem", 2, "analyze"): 1,
        ("mem", 1, "run"): 1,
        ("mem", 1, "analyze"): 1,
    }
    result = read_model(case_dir(finished.settings, "one-apply") / "result.json", CaseResult)
    assert result is not None and result.steps == 7
    step_tokens = sum(
        e.get("tokens", 0) for e in events if e.get("case") == "one-apply" and e["kind"] == "step_finished"
    )
    assert result.usage.tokens == step_tokens > 0
    kinds = {e["kind"] for e in events}
    assert {
        "case_completed",
        "case_difficult",
        "case_failed",
        "attempt_set_aside",
        "memory_submitted",
    } <= kinds


async def test_status_counts_every_outcome_and_the_tuning_costs(finished: Fleet) -> None:
    """The live counters agree with the store: states per tuning, tokens and cost."""
    async with finished.client() as client:
        status = await client.status()
    tuning = status.tunings[0]
    rows = finished.results().values()
    assert tuning.completed == sum(r.state == "completed" for r in rows)
    assert tuning.difficult == sum(r.state == "difficult" for r in rows)
    assert tuning.failed == sum(r.state == "failed" for r in rows)
    assert tuning.tokens == sum(r.tokens for r in rows)
    assert tuning.running == 0 and status.queue_depth == 0


async def test_notes_record_gradings_and_difficulties(finished: Fleet) -> None:
    """A difficult case's notes hold its gradings and the difficulty with its phase."""
    notes = [
        json.loads(line)
        for line in (case_dir(finished.settings, "no-memory") / "notes.jsonl").read_text().splitlines()
    ]
    assert [n["kind"] for n in notes].count("graded") == 3
    assert notes[-1]["kind"] == "difficult" and notes[-1]["text"] == "with memory: memory"
