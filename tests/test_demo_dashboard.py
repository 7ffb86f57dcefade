"""`tunefleet demo` serves the dashboard on a loopback port while it runs and prints its address, and
says how to keep browsing the finished tuning; `tunefleet demo-serve` serves it afterwards until Ctrl-C.
Real processes, a real Redis, the page and the API fetched over HTTP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from service.kinds.evals.history.models import VersionList
from tests.support.fleet import Fleet, case, demo_adapter, settings_env, write_tuning

ADDRESS = re.compile(r"^dashboard: (http://127\.0\.0\.1:\d+/)")


def start(fleet: Fleet, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service", *args],
        env={
            **os.environ,
            **settings_env(fleet.settings),
            "TUNEFLEET_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def address(proc: subprocess.Popen[str]) -> str:
    """The dashboard's address, from the first line that gives it."""
    assert proc.stdout is not None
    for line in proc.stdout:
        found = ADDRESS.match(line)
        if found:
            return found.group(1)
    raise AssertionError(f"no dashboard address printed; stderr: {proc.stderr.read() if proc.stderr else ''}")


def test_the_demo_serves_its_dashboard_while_it_runs_and_after(fleet: Fleet, tmp_path: Path) -> None:
    """While `tunefleet demo` runs, the printed address answers with the dashboard and the tuning's
    versions; once it ends it names `demo-serve`, which serves the finished tuning until SIGINT."""
    no_goals = tmp_path / "no-goals"
    no_goals.mkdir()
    cases = [case("slow", rules=["a"]), case("fine")]
    tuning = write_tuning(tmp_path / "t", cases, adapter=demo_adapter(run_ms=1500, analyze_ms=200))
    demo = start(fleet, "demo", "--tuning", str(tuning), "--workers", "1", "--goals", str(no_goals))
    try:
        url = address(demo)
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "tunefleet" in page.text
        listed = VersionList.model_validate_json(
            httpx.get(url + "api/tunings/t1/versions", timeout=10).content
        )
        assert listed.versions[0].status == "initial"
        assert demo.poll() is None, "the demo was still running while its dashboard answered"
        rest, _ = demo.communicate(timeout=120)
    finally:
        demo.kill()
    assert demo.returncode == 0
    assert f"tunefleet demo-serve {tuning}" in rest
    serving = start(fleet, "demo-serve", str(tuning))
    try:
        url = address(serving)
        listed = VersionList.model_validate_json(
            httpx.get(url + "api/tunings/t1/versions", timeout=10).content
        )
        assert [row.status for row in listed.versions] == ["initial", "published"]
        serving.send_signal(signal.SIGINT)
        _, errors = serving.communicate(timeout=60)  # drains both pipes while it stops
    finally:
        serving.kill()
    assert serving.returncode == 0, errors
