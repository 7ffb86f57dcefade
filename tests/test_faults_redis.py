"""Redis restarted (with AOF) or emptied (without persistence) mid-tuning: every case still ends in the
outcome it would have, and no recorded step runs twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.settings import FleetSettings
from tests.support.fleet import (
    RULE_CASES,
    Fleet,
    case,
    demo_adapter,
    steps_run_twice,
    wait_until,
    write_tuning,
)
from tests.support.redis_server import RedisServer

CASES = [*RULE_CASES] + [case(f"extra-{i}", rules=[f"extra-{i}-a"]) for i in range(12)]
EXPECTED = {
    "pass": ("completed", None),
    "one-apply": ("completed", None),
    "two-applies": ("completed", None),
    "wrong": ("difficult", "wrong"),
    "flawed": ("difficult", "specification"),
    "structural": ("difficult", "structural"),
    "no-memory": ("difficult", "memory"),
    "voids": ("completed", None),
    "killed": ("completed", None),
}


@pytest.mark.parametrize("persistent", [True, False], ids=["restarted-with-aof", "emptied"])
async def test_cases_survive_redis_going_away(
    settings: FleetSettings, tmp_path: Path, persistent: bool
) -> None:
    """Mid-tuning, Redis is killed and started again, keeping its AOF or losing everything; the daemon and
    the workers carry on and every case ends as declared with each recorded step run once."""
    server = RedisServer(tmp_path / "own-redis", appendonly=persistent)
    server.start()
    fleet = Fleet(settings.model_copy(update={"redis_url": server.url}), tmp_path / "fleet-logs")
    try:
        adapter = demo_adapter(run_ms=250, analyze_ms=100, apply_ms=50)
        tuning = write_tuning(tmp_path / "t", CASES, adapter=adapter)
        fleet.start_daemon(tuning)
        await wait_until(
            lambda: (fleet.settings.store / "tunings/t1/events.jsonl").exists(), 30, "the daemon"
        )
        fleet.start_worker(concurrency=6)
        fleet.start_worker(concurrency=6)
        await wait_until(
            lambda: sum(r.state != "unfinished" for r in fleet.results().values()) >= 4,
            60,
            "some cases to finish",
        )
        server.restart()
        rows = await fleet.wait_finished(len(CASES), timeout_s=120)
    finally:
        fleet.teardown()
        server.stop()
    for case_id, (state, reason) in EXPECTED.items():
        assert rows[case_id].state == state, (case_id, rows[case_id])
        got = rows[case_id].reason
        if reason is None:
            assert not got, (case_id, rows[case_id])
        else:
            assert got is not None and got.startswith(reason), (case_id, rows[case_id])
    assert all(rows[f"extra-{i}"].state == "completed" for i in range(12))
    events = fleet.events()
    recovered = "redis_state_lost" in (tmp_path / "fleet-logs" / "daemon.log").read_text()
    assert recovered != persistent  # only an emptied Redis makes the daemon restore from the store
    if not persistent:
        assert any(e["kind"] == "case_requeued" and "reconciled" in (e.get("detail") or "") for e in events)
    for case_id in rows:
        assert not steps_run_twice(events, case_id), case_id
