"""A job whose claim crashes every time is counted like a lost lease and ends failed (poison) at
`max_lease_losses`, instead of being claimed for ever; the worker that crashed on it runs on (issue 54,
item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.fleet import Fleet, settings_env, wait_until
from tests.support.goals import start_goal, write_goal

LOSSES = 3


async def test_a_goal_that_crashes_at_every_claim_ends_poison(fleet: Fleet, tmp_path: Path) -> None:
    """A goal whose load raises at every claim (an injected defect) is claimed `max_lease_losses` times,
    then ends failed with a reason naming poison and the exception; the worker is still running, and the
    daemon's reconcile does not queue the goal again."""
    await start_goal(fleet, write_goal(tmp_path / "goals"))
    log_path = fleet.logs / "crashing-worker.log"
    env = {
        **os.environ,
        **settings_env(fleet.settings),
        "TUNEFLEET_LOG_FORMAT": "json",
        "TUNEFLEET_MAX_LEASE_LOSSES": str(LOSSES),
    }
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.support.crashing_worker", "--concurrency", "2"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    fleet.workers.append(worker)

    async def ended() -> bool:
        async with fleet.client() as client:
            found = {s.id: s for s in await client.goals.summaries()}
        return "g1" in found and found["g1"].status == "failed"

    await wait_until(ended, 60, "the goal to end failed")
    async with fleet.client() as client:
        (summary,) = await client.goals.summaries()
    assert summary.reason is not None and summary.reason.startswith(
        f"poison: the goal crashed its claim {LOSSES}"
    )
    assert "OverflowError" in summary.reason
    events = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert sum(e.get("event") == "goal_crashed_at_claim" for e in events) == LOSSES
    assert worker.poll() is None
    async with fleet.client() as client:
        assert await client.goals.reconcile() == 0  # failed before its start: left for a person to mend
