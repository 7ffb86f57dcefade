"""A sandbox outage in the middle of a tuning: one fleet-wide breaker, paced probes, nothing marked."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from tests.support.fleet import Fleet, case, demo_adapter, event_time_s, wait_until, write_tuning

OUTAGE_S = 10.0
WORKERS = 3


async def test_an_outage_opens_one_breaker_paces_probes_and_marks_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    """10 s of sandbox outage with three workers: no case marked, one probe per interval fleet-wide (growing,
    capped), and every worker runs again within a poll of the breaker closing."""
    outage = tmp_path / "sandbox-down"
    adapter = demo_adapter(run_ms=400, analyze_ms=50, apply_ms=50, outage_file=str(outage))
    cases = [case(f"c{i:02d}", rules=[f"c{i:02d}-a"] if i % 2 else []) for i in range(45)]
    await fleet.start_tuning(write_tuning(tmp_path / "t", cases, adapter=adapter))
    workers = [fleet.start_worker(concurrency=4) for _ in range(WORKERS)]
    await wait_until(
        lambda: sum(r.state != "unfinished" for r in fleet.results().values()) >= 3,
        60,
        "a few cases to finish",
    )
    outage.touch()
    down_at = time.time()
    # The outage itself: the sandbox stays down this long, time enough for the probe interval to grow
    # from breaker_probe_base_s to its cap and be spent there at least once.
    await asyncio.sleep(OUTAGE_S)
    outage.unlink()
    up_at = time.time()
    rows = await fleet.wait_finished(len(cases), timeout_s=120)

    assert {r.state for r in rows.values()} == {"completed"}
    events = fleet.events()
    opened = [e for e in events if e["kind"] == "breaker_opened"]
    closed = [e for e in events if e["kind"] == "breaker_closed"]
    assert len(opened) == 1 and len(closed) == 1
    assert down_at <= event_time_s(opened[0]) <= down_at + 2
    probes = [event_time_s(e) for e in events if e["kind"] == "breaker_probed"]
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    s = fleet.settings
    assert all(gap >= s.breaker_probe_base_s * 0.9 for gap in gaps), gaps
    assert len(probes) <= OUTAGE_S / s.breaker_probe_base_s
    assert max(gaps) >= s.breaker_probe_max_s * 0.9  # the interval grew to its cap
    closed_at = event_time_s(closed[0])
    assert up_at <= closed_at <= up_at + s.breaker_probe_max_s + s.breaker_probe_base_s + 1
    for proc in workers:
        first_after = min(
            event_time_s(e)
            for e in events
            if e["kind"] == "step_started"
            and e["step"] == "run"
            and e["worker"].endswith(f":{proc.pid}")
            and event_time_s(e) >= closed_at
        )
        assert first_after - closed_at <= s.poll_delay_s + 0.5
    during = [
        e
        for e in events
        if e["kind"] == "step_finished"
        and e["step"] == "run"
        and event_time_s(opened[0]) + 0.5 < event_time_s(e) < closed_at
    ]
    assert during == []
