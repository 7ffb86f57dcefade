"""REPORT.md stays true: it names the version it measured, says when `main` moved on since, and `eval
status` labels an evaluation `main` only while its version is main (issue 53)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import yaml

from service.kinds.evals.report import REPORT_FILE
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, case_folder, demo_adapter, wait_until, write_tuning


def main_of(repo: Path) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", "main"], capture_output=True, text=True, check=True
    ).stdout.strip()


async def test_a_report_says_it_is_stale_once_main_moves_on(fleet: Fleet, tmp_path: Path) -> None:
    """After the tuning's report is written, a submitted case whose apply moves `main` makes the daemon
    rewrite REPORT.md saying it is stale (with the versions and how to measure main); `tunefleet report`
    says the same, and `eval status` labels the final evaluation `was main` instead of `main`."""
    root = tmp_path / "t"
    case_folder(root / "heldout", [case("h0", rules=["r1"]), case("h1")])
    tuning_file = write_tuning(
        root,
        [case("c0", rules=["r1"]), case("c1")],
        adapter=demo_adapter(run_ms=20, analyze_ms=10, apply_ms=10),
        holdout={"cases": "heldout"},
    )
    daemon = fleet.start_daemon(tuning_file)
    fleet.start_worker(concurrency=4)
    store = fleet.settings.store / "tunings" / "t1"
    report_file = store / REPORT_FILE
    try:
        await wait_until(report_file.exists, 120, "the report")
        first = report_file.read_text()
        measured = main_of(store / "system.git")
        assert (
            "Stale" not in first and f"It is the version measured above as final (`{measured[:12]}`)" in first
        )
        assert "(main)" in tunefleet("eval", "status", env=fleet_env(fleet.settings)).stdout
        late = tmp_path / "late"
        late.mkdir()
        (late / "late.yaml").write_text(yaml.safe_dump(case("late", rules=["r2"])))
        assert tunefleet("submit", str(late), "--tuning", "t1", env=fleet_env(fleet.settings)).returncode == 0
        await wait_until(lambda: main_of(store / "system.git") != measured, 60, "main to move")
        await wait_until(lambda: "*Stale:" in report_file.read_text(), 30, "the report to say it is stale")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    moved = main_of(store / "system.git")
    stale = report_file.read_text()
    assert f"final version measured below is `{measured[:12]}`" in stale and f"to `{moved[:12]}`" in stale
    assert "tunefleet eval run t1 --split holdout" in stale
    assert f"--version {measured[:12]}" in stale  # how to take the measured version home
    printed = tunefleet("report", "t1", env=fleet_env(fleet.settings))
    assert printed.returncode == 0 and "*Stale:" in printed.stdout
    status = tunefleet("eval", "status", env=fleet_env(fleet.settings)).stdout
    final_rows = [line for line in status.splitlines() if "holdout-final" in line]
    assert final_rows and "(was main)" in final_rows[0] and "(main)" not in final_rows[0], status
