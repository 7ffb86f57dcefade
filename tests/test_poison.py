"""A poison case among innocent ones, on workers that it keeps killing: only the poison case fails."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from tests.support.supervisor import Supervisor

PLAIN = 20


async def test_only_the_poison_case_fails_among_innocents_on_supervised_workers(
    fleet: Fleet, tmp_path: Path
) -> None:
    """1 case that SIGKILLs every worker that runs it and 20 plain ones on 3 supervised workers: the
    poison case ends failed as poison, every plain one completes, and plain cases did die beside it."""
    cases = [case("poison", kills_worker=100, latency_ms=200)] + [case(f"plain-{i}") for i in range(PLAIN)]
    adapter = demo_adapter(run_ms=3000, analyze_ms=300)
    async with Supervisor(fleet, count=3, concurrency=8).running() as supervisor:
        await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=adapter))
        rows = await fleet.wait_finished(PLAIN + 1, timeout_s=150)
    poison = rows.pop("poison")
    losses = fleet.settings.max_lease_losses
    assert (poison.state, poison.reason) == ("failed", f"poison: the case lost its lease {losses} times")
    assert {c: (r.state, r.reason) for c, r in rows.items() if r.state != "completed"} == {}
    assert supervisor.deaths.count(-signal.SIGKILL) >= fleet.settings.max_lease_losses
    started = [e for e in fleet.events() if e["kind"] == "case_started"]
    innocents_hit = {e["case"] for e in started if e["case"] != "poison" and e["data"]["suspect"]}
    assert innocents_hit, "no plain case lost its lease beside the poison case: the test proved nothing"
