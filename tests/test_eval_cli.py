"""`tunefleet eval` and `tunefleet report` as a user runs them: bad input is one `error:` line and
queues nothing; good input queues one job per (case, repeat)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from redis.asyncio import Redis

from service.core.settings import FleetSettings
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, wait_until, write_tuning

CASES = [case(f"c{i}") for i in range(4)]


async def queued(settings: FleetSettings) -> int:
    r = Redis.from_url(settings.redis_url)
    try:
        return int(await r.zcard(settings.queue))
    finally:
        await r.aclose()


def evals_kept(settings: FleetSettings) -> list[str]:
    folder = settings.store / "evals"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--version", "deadbeef"], "--version 'deadbeef': no such version"),
        (["--version", "v2"], "--version 'v2': no such version"),
        (["--repeat", "0"], "--repeat 0: expected 1 to 1000"),
        (["--split", "holdout"], "--split holdout: the tuning has no held-out split"),
        (["--split", "sideways"], "--split 'sideways': expected holdout, train or all"),
        (["--name", "Not A Slug"], "--name 'Not A Slug': expected a safe slug"),
        (["--cases", "/no/such/folder"], "--cases /no/such/folder: expected a folder"),
    ],
)
async def test_bad_input_is_one_error_line_and_queues_nothing(
    fleet: Fleet, tmp_path: Path, args: list[str], message: str
) -> None:
    """Each mistake gets one `error:` line naming the option and what was expected, exit 2, and neither
    a job in the queue nor an evaluation in the store."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    before = await queued(fleet.settings)
    done = tunefleet("eval", "t1", *args, env=fleet_env(fleet.settings))
    assert done.returncode == 2, done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert await queued(fleet.settings) == before
    assert evals_kept(fleet.settings) == []


async def test_a_tuning_with_no_cases_and_an_unknown_tuning_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    """An evaluation of a tuning with no cases, or of a tuning nobody registered, queues nothing."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    done = tunefleet("eval", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 2 and "error: tuning t1: --split all: the tuning has no cases" in done.stderr
    done = tunefleet("eval", "nobody", env=fleet_env(fleet.settings))
    assert done.returncode == 2 and "error: tuning 'nobody' is not registered" in done.stderr
    assert await queued(fleet.settings) == 0 and evals_kept(fleet.settings) == []


@pytest.mark.parametrize(
    ("holdout", "message"),
    [
        ({"fraction": 1.0}, "holdout.fraction"),
        ({"fraction": 0.05}, "makes an empty split"),
        ({"cases": "held"}, "case id 'c1'"),
    ],
)
async def test_a_bad_split_stops_the_daemon_before_it_queues_anything(
    fleet: Fleet, tmp_path: Path, holdout: dict[str, object], message: str
) -> None:
    """A held-out fraction outside (0, 1), one leaving a side empty, or a held-out folder whose ids
    collide with the train cases: `tunefleet daemon` says so in one error line and queues nothing."""
    root = tmp_path / "t"
    tuning_file = write_tuning(root, CASES, holdout=holdout)
    (root / "held").mkdir()
    (root / "held" / "c1.yaml").write_text(yaml.safe_dump(case("c1")))
    done = tunefleet("daemon", "--once", str(tuning_file), env=fleet_env(fleet.settings))
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0] and str(tuning_file) in errors[0], done.stderr
    assert await queued(fleet.settings) == 0 and evals_kept(fleet.settings) == []


async def test_an_evaluation_queues_one_job_per_case_and_repeat(fleet: Fleet, tmp_path: Path) -> None:
    """`eval t1 --repeat 3 --name e1` queues 4 cases x 3 items on the current version; status lists it
    as queued, and its results have one pending row per case."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    cases_before = await queued(fleet.settings)
    done = tunefleet("eval", "t1", "--repeat", "3", "--name", "e1", env=fleet_env(fleet.settings))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("eval e1: queued 12 items (4 cases x 3) on version ")
    assert await queued(fleet.settings) == cases_before + 12
    listing = json.loads(
        tunefleet("eval", "status", "--format", "json", env=fleet_env(fleet.settings)).stdout
    )
    assert [(e["head"]["id"], e["head"]["items"], e["status"]) for e in listing] == [("e1", 12, "queued")]
    rows = tunefleet(
        "eval", "results", "e1", "--format", "tsv", env=fleet_env(fleet.settings)
    ).stdout.splitlines()
    assert rows[0].split("\t")[:3] == ["case", "rev", "repeats"]
    assert [row.split("\t")[6] for row in rows[1:]] == ["pending"] * 4
    again = tunefleet("eval", "t1", "--repeat", "3", "--name", "e1", env=fleet_env(fleet.settings))
    assert again.returncode == 0 and await queued(fleet.settings) == cases_before + 12  # the same one
    other = tunefleet("eval", "t1", "--repeat", "2", "--name", "e1", env=fleet_env(fleet.settings))
    assert other.returncode == 2 and "another evaluation has this id" in other.stderr


async def test_reading_an_unknown_evaluation_is_one_error_line(fleet: Fleet) -> None:
    """`eval show`, `results`, `status ID`, `compare` and `plan` of an id the store lacks say so in one
    line."""
    reads = (
        ["show", "nope"],
        ["results", "nope"],
        ["status", "nope"],
        ["compare", "nope", "nada"],
        ["plan", "nope"],
    )
    for args in reads:
        done = tunefleet("eval", *args, env=fleet_env(fleet.settings))
        assert done.returncode == 2
        assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
            f"error: no evaluation 'nope' in the store {fleet.settings.store.resolve()}"
        ]


async def test_an_ended_evaluation_plans_the_next_one(fleet: Fleet, tmp_path: Path) -> None:
    """`eval plan e1` reads the per-case pass rates of an ended evaluation and prints, for each number of
    repeats, the cases needed (fewer with more repeats); a bad difference is one error line."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    assert (
        tunefleet("eval", "t1", "--repeat", "2", "--name", "e1", env=fleet_env(fleet.settings)).returncode
        == 0
    )
    fleet.start_worker(concurrency=4)
    await wait_until(lambda: evaluation_ended(fleet.settings, "e1"), 60, "the evaluation ended")
    done = tunefleet(
        "eval", "plan", "e1", "--difference", "0.2", "--format", "tsv", env=fleet_env(fleet.settings)
    )
    assert done.returncode == 0, done.stderr
    header, *rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert header == ["repeats", "cases", "runs"]
    assert [int(row[0]) for row in rows] == [1, 2, 3, 5, 10, 20]
    needed = [int(row[1]) for row in rows]
    assert needed == sorted(needed, reverse=True)
    bad = tunefleet("eval", "plan", "e1", "--difference", "2", env=fleet_env(fleet.settings))
    assert bad.returncode == 2 and bad.stderr.startswith("error: difference: 2.0 is not"), bad.stderr


def evaluation_ended(settings: FleetSettings, eval_id: str) -> bool:
    done = tunefleet("eval", "show", eval_id, "--format", "json", env=fleet_env(settings))
    return done.returncode == 0 and json.loads(done.stdout)["status"] == "finished"
