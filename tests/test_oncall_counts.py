"""What on-call reads: a case whose file cannot be read ends `failed` and is counted; `status` and
`watch` count cancelled cases, in the same words."""

from __future__ import annotations

import asyncio
import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from service.cli.render import status_table
from service.core.models.status import FleetStatus, TuningStatus
from service.core.store import CaseStore, Store
from service.watch.snapshot import WatchSnapshot
from service.watch.view import overview, tunings_table
from tests.support.fleet import Fleet, case, wait_until, write_tuning


def case_store(fleet: Fleet, case_id: str) -> CaseStore:
    return Store(fleet.settings.store).tuning("t1").case(case_id, 1)


async def tuning_status(fleet: Fleet) -> TuningStatus:
    async with fleet.client() as client:
        return (await client.status()).tunings[0]


def worker_events(fleet: Fleet, event: str) -> list[dict[str, object]]:
    lines = [json.loads(raw) for raw in fleet.log_of(0).splitlines() if raw.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def outcome_headers(table: Table) -> list[str]:
    words = ("completed", "difficult", "failed", "cancelled", "done")
    return [str(c.header) for c in table.columns if str(c.header) in words]


async def test_an_invalid_case_file_ends_the_case_failed_with_the_file_and_the_problem(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A case whose case.json is not valid JSON ends `failed` once, its reason naming the file, and
    `status` counts it failed; the worker goes on with the other cases."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("good"), case("broken")]))
    broken = case_store(fleet, "broken")
    broken.case_file.write_text("{not json")
    fleet.start_worker()
    good = case_store(fleet, "good")
    await wait_until(lambda: good.result_file.exists() and broken.result_file.exists(), 30, "both results")
    assert (good_result := good.result()) is not None and good_result.state == "completed"
    result = broken.result()
    assert result is not None and result.state == "failed"
    assert result.reason is not None and str(broken.case_file) in result.reason
    assert "the case could not be loaded" in result.reason
    async with fleet.client() as client:  # the job finished: nothing of it is queued or running
        began = time.monotonic()
        while (await client.status()).queue_depth or (await client.running("t1")):
            assert time.monotonic() - began < 30, "the broken case's job never finished"
            await asyncio.sleep(fleet.settings.poll_delay_s)
    status = await tuning_status(fleet)
    assert (status.completed, status.failed, status.running, status.waiting) == (1, 1, 0, 0)
    assert fleet.results()["broken"].state == "failed"  # results lists a case whose file went bad
    failed = [e for e in fleet.events() if e["kind"] == "case_failed" and e.get("case") == "broken"]
    assert len(failed) == 1 and failed[0]["detail"] == result.reason
    assert len(worker_events(fleet, "case_unreadable")) == 1  # finished: not claimed again


async def test_a_missing_case_file_ends_the_case_failed_in_results_and_status(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A case whose case.json is gone from the store ends `failed` with the file in its reason, as
    `results` shows it, and `status` counts it failed."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("gone")]))
    missing = case_store(fleet, "gone")
    missing.case_file.unlink()
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    assert rows["gone"].state == "failed"
    assert rows["gone"].reason is not None and str(missing.case_file) in rows["gone"].reason
    assert "missing from the store" in rows["gone"].reason

    # The counters move with the event's entry in the Redis stream, in one script; its line in
    # events.jsonl is written just before that script is sent (docs/architecture.md, "Events"), so
    # the file is no signal that the counters moved: status itself is waited on.
    async def counted() -> bool:
        status = await tuning_status(fleet)
        return (status.failed, status.waiting, status.running) == (1, 0, 0)

    await wait_until(counted, 10, "status to count the case failed")
    assert [e["kind"] for e in fleet.events() if e.get("case") == "gone"][-1] == "case_failed"


async def test_status_shows_how_many_cases_were_cancelled(fleet: Fleet, tmp_path: Path) -> None:
    """After `cancel`, the status table has a `cancelled` column that counts them."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{i}") for i in range(3)]))
    async with fleet.client() as client:
        assert len(await client.cancel("t1")) == 3
        status = await client.status()
    group = status_table(status)
    table = next(r for r in group.renderables if isinstance(r, Table))
    headers = [str(c.header) for c in table.columns]
    assert "cancelled" in headers
    cells = list(table.columns[headers.index("cancelled")].cells)
    assert [str(cell) for cell in cells] == ["3"]
    console = Console(record=True, width=300, file=io.StringIO())
    console.print(group)
    assert "cancelled" in console.export_text()


def test_watch_counts_outcomes_in_the_words_of_status() -> None:
    """The watch's tunings table heads its outcome counts exactly as `status` does, cancelled included,
    and shows each count under its word."""
    tuning = TuningStatus(name="t1", completed=5, difficult=4, failed=3, cancelled=2)
    status = FleetStatus(queue_depth=0, in_progress=0, breaker={}, paused=False, workers=[], tunings=[tuning])
    snapshot = WatchSnapshot(taken_at=datetime(2025, 1, 2, 12, tzinfo=UTC), status=status)
    watch = tunings_table(snapshot, 1)
    shown = status_table(status)
    table = next(r for r in shown.renderables if isinstance(r, Table))
    assert (
        outcome_headers(watch) == outcome_headers(table) == ["completed", "difficult", "failed", "cancelled"]
    )
    screen = Console(width=100, height=20, file=io.StringIO(), color_system=None, record=True)
    screen.print(overview(snapshot, 0, 100, 20))
    header = screen.export_text().splitlines()[1].split()
    assert "done" not in header and header[header.index("running") + 1 :][:4] == [
        "completed",
        "difficult",
        "failed",
        "cancelled",
    ]
    by_header = {str(c.header): [str(cell) for cell in c.cells] for c in watch.columns}
    assert [by_header[w] for w in ("completed", "difficult", "failed", "cancelled")] == [
        ["5"],
        ["4"],
        ["3"],
        ["2"],
    ]
