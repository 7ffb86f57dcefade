"""`status` counts every kind of job under way, not only cases, and CLI commands keep their standard error
free of info logs (issue 53)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from service.client.queries import running_by_kind
from service.core.settings import FleetSettings
from tests.support.cli import tunefleet
from tests.support.fleet import Fleet, case, demo_adapter, settings_env, wait_until, write_tuning


def quiet_env(settings: FleetSettings, **more: str) -> dict[str, str]:
    """The test's fleet as the environment, the log level left to the command unless given in `more`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")} | settings_env(settings)
    return {k: v for k, v in env.items() if k != "TUNEFLEET_LOG_LEVEL"} | more


def test_job_ids_are_counted_by_kind() -> None:
    """A case, a goal, an evaluation's item and a gate's item are each counted under their kind, once
    however many workers name them."""
    jobs = [
        "case:t1:c1:1",
        "goal:g1",
        "eval:t1:before:c1:1",
        "eval:t1:before:c1:2",
        "eval:t1:gate-0a1b2c:c1:1",
        "eval:t1:gate-base-9f:c2:1",
        "case:t1:c1:1",
    ]
    assert running_by_kind(jobs) == {"cases": 1, "goals": 1, "eval items": 2, "gate items": 2}


async def test_status_counts_evaluation_items_under_way(fleet: Fleet, tmp_path: Path) -> None:
    """While a worker runs two evaluation items and no case, `status --json` counts them as running (by
    kind) and not as queued, and the table says what runs."""
    slow = demo_adapter(run_ms=60_000)
    await fleet.start_tuning(write_tuning(tmp_path / "t", [], runner=slow, analyzer=slow, applier=slow))
    folder = tmp_path / "eval-cases"
    folder.mkdir()
    for name in ("e1", "e2"):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(case(name)))
    queued = tunefleet(
        "eval", "run", "t1", "--cases", str(folder), "--name", "slow", env=quiet_env(fleet.settings)
    )
    assert queued.returncode == 0, queued.stderr
    fleet.start_worker(concurrency=4)

    def status() -> dict[str, object]:
        done = tunefleet("status", "--json", env=quiet_env(fleet.settings))
        assert done.returncode == 0, done.stderr
        found: dict[str, object] = json.loads(done.stdout)
        return found

    await wait_until(lambda: status()["running_by_kind"] == {"eval items": 2}, 30, "two items running")
    now = status()
    assert now["in_progress"] == 2 and now["queue_depth"] == 0, now
    table = tunefleet("status", env=quiet_env(fleet.settings))
    assert "running 2 (2 evaluation items)" in table.stdout, table.stdout


async def test_submit_and_eval_log_nothing_below_warning(fleet: Fleet, tmp_path: Path) -> None:
    """With standard error a file, `submit` and `eval run` print only their own line on standard output and
    nothing below warning on standard error; asked for (`TUNEFLEET_LOG_LEVEL=info`), the logs come back."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")]))
    more = tmp_path / "more"
    more.mkdir()
    (more / "c2.yaml").write_text(yaml.safe_dump(case("c2")))
    err = tmp_path / "stderr.log"
    submitted = tunefleet(
        "submit", str(more), "--tuning", "t1", env=quiet_env(fleet.settings), stderr_file=err
    )
    evaluated = tunefleet("eval", "run", "t1", "--name", "e", env=quiet_env(fleet.settings), stderr_file=err)
    assert submitted.returncode == 0 and evaluated.returncode == 0, err.read_text()
    assert submitted.stdout == "enqueued 1, already known 0, refused 0\n"
    assert evaluated.stdout.startswith("eval e: queued") and len(evaluated.stdout.splitlines()) == 1
    assert err.read_text() == ""
    loud = tunefleet(
        "eval",
        "run",
        "t1",
        "--name",
        "e2",
        env=quiet_env(fleet.settings, TUNEFLEET_LOG_LEVEL="info"),
        stderr_file=err,
    )
    assert loud.returncode == 0
    assert any(json.loads(line)["event"] == "eval_queued" for line in err.read_text().splitlines())
