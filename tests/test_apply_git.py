"""Git at the apply step, on a real fleet: a commit the repository refuses fails the apply with the
reason, and a hung mirror remote delays no apply (the daemon pushes, after the lock, under a timeout)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from service.core.io.files import read_model
from service.core.models.records import ApplyRecord
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from tests.support.git import HANGING_HOOK, bare_remote, refuse_new_objects


async def test_a_refused_commit_fails_the_apply_with_its_reason(fleet: Fleet, tmp_path: Path) -> None:
    """When the system repository refuses the apply's new objects, the case ends failed saying so, and the
    edit is never recorded as "no change"."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("needs-a-rule", rules=["rule-a"])]))
    refuse_new_objects(fleet.settings.store / "tunings/t1/system.git")
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    row = rows["needs-a-rule"]
    assert row.state == "failed" and "cannot be recorded" in (row.reason or ""), row.reason
    assert "/objects/" in (row.reason or "")
    attempt = fleet.settings.store / "tunings/t1/cases/needs-a-rule/r1/nomem/1"
    assert read_model(attempt / "apply.json", ApplyRecord) is None
    applies = [e for e in fleet.events() if e["kind"] == "step_finished" and e.get("step") == "apply"]
    assert applies == []


async def test_a_hung_mirror_remote_delays_no_apply(settings: FleetSettings, tmp_path: Path) -> None:
    """With a remote that never answers, every apply publishes as fast as without one; the daemon's
    push fails at its timeout and status shows it."""
    mirror_timeout_s = 1.0
    fleet = Fleet(settings.model_copy(update={"mirror_timeout_s": mirror_timeout_s}), tmp_path / "logs")
    try:
        remote = bare_remote(tmp_path / "remote.git", HANGING_HOOK)
        cases = [case(f"c{i}", rules=[f"c{i}-a", f"c{i}-b"]) for i in range(4)]
        tuning = write_tuning(tmp_path / "t", cases, adapter=demo_adapter(), remote=str(remote))
        await fleet.start_tuning(tuning)
        fleet.start_daemon(tuning)  # its mirror pushes to the hung remote
        fleet.start_worker()
        rows = await fleet.wait_finished(4, timeout_s=90)
        assert {row.state for row in rows.values()} == {"completed"}, [r.reason for r in rows.values()]
        applies = [e for e in fleet.events() if e["kind"] == "step_finished" and e.get("step") == "apply"]
        assert len(applies) == 8 and all(e["data"]["outcome"] == "published" for e in applies)
        assert max(e["duration_ms"] for e in applies) < mirror_timeout_s * 1000
        starts = [e for e in fleet.events() if e["kind"] == "step_started" and e.get("step") == "apply"]
        assert max(e["data"]["lock_wait_ms"] for e in starts) < mirror_timeout_s * 1000

        async with fleet.client() as client:
            began = time.monotonic()
            while (mirror := (await client.status()).tunings[0].mirror) is None or mirror.error is None:
                assert time.monotonic() - began < 30, "status never showed the mirror failing"
                await asyncio.sleep(0.1)
        assert "no answer within 1 s" in mirror.error
    finally:
        fleet.teardown()
