"""The dashboard's goals in a real headless Chromium, served by a real uvicorn, while a real worker
pursues a demo goal: the list follows it, and its page shows every iteration with the reviewer's
verdicts and the remaining work.

Needs Debian's `chromium` and the `playwright` Python package (as tests/test_dashboard_browser.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from service.client.client import TunefleetClient
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet
from tests.support.goals import start_goal, wait_goal_ended, write_goal
from tests.support.tools import needs_tool
from tests.test_dashboard_browser import browser_page, served

WAIT_MS = 30_000

pytestmark = [
    needs_tool("chromium"),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="needs the playwright Python package (pip install playwright; no browser download)",
    ),
    pytest.mark.timeout(120),
]


async def test_the_goals_page_shows_iterations_verdicts_and_remaining_work(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """A goal that completes in its second iteration is listed with its status and iteration; its page
    has a column per iteration with the TODO, the worker's result, each verdict and its remaining work."""
    from playwright.async_api import expect

    demo = {"complete_at": 2, "tasks": 2, "step_ms": 1000}
    await start_goal(fleet, write_goal(tmp_path / "goals", "haiku", demo=demo))
    row = '#goals tr[data-goal="haiku"]'
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        await page.goto(url)
        await expect(page.locator(f"{row} td.status")).to_have_text("queued", timeout=WAIT_MS)
        fleet.start_worker()
        await expect(page.locator(f"{row} td.status")).to_have_text("running", timeout=WAIT_MS)
        await wait_goal_ended(fleet, "haiku")
        await expect(page.locator(f"{row} td.status")).to_have_text("completed", timeout=WAIT_MS)
        await expect(page.locator(f"{row} td.iteration")).to_have_text("2")
        ended = page.locator("#events tbody tr.kind-goal_completed").first
        await expect(ended.locator("a")).to_have_attribute("href", "#/goal/haiku", timeout=WAIT_MS)
        await expect(ended.locator("td").nth(3)).to_have_text("it 2")
        await page.screenshot(path=str(tmp_path / "goals-list.png"), full_page=True)

        await page.locator("#goals a", has_text="haiku").click()
        await expect(page.locator("#goal-view")).to_be_visible()
        assert page.url.endswith("#/goal/haiku")
        await expect(page.locator("#goal-outcome")).to_have_text("completed", timeout=WAIT_MS)
        await expect(page.locator("#goal-title")).to_have_text("haiku: Finish haiku")
        heads = page.locator("#iterations thead th[data-iteration]")
        await expect(heads).to_have_text(["iteration 1", "iteration 2"])
        verdicts = page.locator('#iterations tr[data-row="verdict"] td')
        await expect(verdicts).to_have_text(["continue · not complete", "complete · complete"])
        summaries = page.locator('#iterations tr[data-row="summary"] td')
        await expect(summaries).to_have_text(["demo review of iteration 1", "demo review of iteration 2"])
        remaining = page.locator('#iterations tr[data-row="remaining"] td')
        await expect(remaining.nth(0)).to_have_text("continue the goal in iteration 2")
        await expect(remaining.nth(1)).to_have_text("none")
        todo = page.locator('#iterations tr[data-row="todo"] td').nth(1)
        await expect(todo.locator("li[data-task]")).to_have_count(2)
        await expect(todo).to_contain_text("T1 continue the goal in iteration 2")
        work = page.locator('#iterations tr[data-row="work"] td')
        await expect(work.nth(0)).to_contain_text("2 of 2 tasks finished")
        await expect(page.locator("#goal-remaining")).to_contain_text("from the review of iteration 2")
        await expect(page.locator("#goal-remaining")).to_contain_text("none: the reviewer left nothing to do")
        await page.screenshot(path=str(tmp_path / "goal.png"), full_page=True)

        await page.locator("#goal-view a", has_text="fleet").click()
        await expect(page.locator("#fleet-view")).to_be_visible()
        await expect(page.locator(row)).to_be_visible()
