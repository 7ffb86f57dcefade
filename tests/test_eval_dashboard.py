"""The dashboard's evaluations in a real headless Chromium, served by a real uvicorn, while real workers
run the held-out evaluations of a tuning: the chart of the pass rate per evaluated version with its
interval, an evaluation in progress, and the report's numbers.

Needs Debian's `chromium` and the `playwright` Python package (as tests/test_dashboard_browser.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.client.client import TunefleetClient
from service.core.settings import FleetSettings
from service.daemon.main import Daemon
from service.kinds.evals.names import final_eval_id, initial_eval_id
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from tests.support.tools import needs_module, needs_tool
from tests.test_dashboard_browser import browser_page, served

WAIT_MS = 60_000
CASES = [case(f"c{i}", rules=["shared"]) for i in range(6)] + [case("easy"), case("hard", rules=["never"])]

pytestmark = [needs_tool("chromium"), needs_module("playwright"), pytest.mark.timeout(180)]


async def test_the_dashboard_charts_evaluated_versions_and_shows_one_in_progress(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """While the imported version's held-out evaluation runs, the page lists it as running with its
    items so far; once tuning ended and the final version was evaluated, the chart has a point and an
    interval per version, and the report's row shows before, after and the difference."""
    from playwright.async_api import expect

    slow_runs = demo_adapter(run_ms=1500, analyze_ms=50, apply_ms=50)
    tuning_file = write_tuning(
        tmp_path / "t", CASES, adapter=slow_runs, holdout={"fraction": 0.5, "seed": 1, "repeats": 2}
    )
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        daemon = Daemon(client)
        await daemon.start([tuning_file])
        await page.goto(url)
        first = f'#evals tr[data-eval="{initial_eval_id("t1")}"]'
        await expect(page.locator(f"{first} .badge")).to_have_text("queued", timeout=WAIT_MS)
        fleet.start_worker(concurrency=3)
        await expect(page.locator(f"{first} .badge")).to_have_text("running", timeout=WAIT_MS)
        await page.screenshot(path=str(tmp_path / "eval-running.png"), full_page=True)
        watching = asyncio.create_task(daemon.run())
        try:
            last = f'#evals tr[data-eval="{final_eval_id("t1")}"]'
            await expect(page.locator(f"{last} .badge")).to_have_text("finished", timeout=WAIT_MS * 2)
            await expect(page.locator("#eval-chart g.eval-point")).to_have_count(2, timeout=WAIT_MS)
            await expect(page.locator("#eval-chart g.eval-point line.interval")).to_have_count(6)
            row = page.locator('#reports tr[data-report="t1"]')
            await expect(row.locator("td.before")).to_contain_text("%", timeout=WAIT_MS)
            await expect(row.locator("td.after")).to_contain_text("%")
            await expect(row.locator("td.diff")).not_to_have_text("–")
            shot = tmp_path / "evals.png"
            await page.locator("#evals-card").screenshot(path=str(shot))
            assert shot.stat().st_size > 5_000
        finally:
            daemon.stopping.set()
            await watching
