"""The dashboard in a real headless Chromium, served by a real uvicorn, while real workers run a tuning.

Needs `chromium` wherever `command -v chromium` finds it and the `playwright` Python package (whose
driver talks to that Chromium; `playwright install` is never needed); skipped with the reason
otherwise, and failed under CI=true. docs/dashboard.png comes from a demo run instead:
scripts/dashboard_screenshot.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from pydantic import SecretStr

from service.api.server import serve
from service.client.client import TunefleetClient
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from tests.support.redis_server import free_port
from tests.support.tools import needs_module, needs_tool

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = shutil.which("chromium") or "chromium"
READ_TOKEN = "tf-dashboard-read-3d81"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CASES = [
    case("pass"),
    case("one-apply", rules=["one-apply-a"]),
    case("two-applies", rules=["two-applies-a", "two-applies-b"]),
    case("flawed", flawed=True),
    case("structural", rules=["structural-a"], structural=True),
    case("voids", voids={"nomem-1": 1}),
    case("also-passes"),
    case("one-more", rules=["one-more-a"]),
    *(case(f"more-{n}", rules=[f"more-{n}-a"] if n % 2 else []) for n in range(4)),
]
COMPLETED = 10
WAIT_MS = 60_000
RUNNING_AND_FINISHING = """(least) => {
  const number = (selector) => Number(document.querySelector(selector).textContent.replace(/,/g, ""));
  return number("#in-progress") > 1 && number('#tunings tr[data-tuning="t1"] td.completed') >= least;
}"""

pytestmark = [
    needs_tool("chromium"),
    needs_module("playwright"),
    pytest.mark.timeout(180),
]


@contextlib.asynccontextmanager
async def served(client: TunefleetClient, settings: FleetSettings) -> AsyncIterator[str]:
    """The API and dashboard served by service.api.server.serve on a free loopback port, reads guarded by
    READ_TOKEN; the URL that opens the dashboard with it (`/?token=…`, which keeps it as a cookie)."""
    port = free_port()
    stopping = asyncio.Event()
    guarded = settings.model_copy(update={"api_port": port, "api_read_token": SecretStr(READ_TOKEN)})
    task = asyncio.create_task(serve(client, guarded, stopping))
    url = f"http://127.0.0.1:{port}/"
    async with httpx.AsyncClient() as web:
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                if (await web.get(url + "openapi.json")).status_code == 200:
                    break
            await asyncio.sleep(0.05)
    try:
        yield f"{url}?token={READ_TOKEN}"
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 1000})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
            yield page
            assert problems == [], problems
        finally:
            await browser.close()


async def number(page: Page, selector: str) -> int:
    return int((await page.locator(selector).inner_text()).replace(",", "") or 0)


async def test_the_dashboard_follows_a_tuning_and_shows_a_case(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """Opened with a read token, the page reads through its cookie; while workers run a tuning the counts
    on it move by themselves, a case's end shows in the events with its state's badge; a case page shows
    its tries."""
    from playwright.async_api import expect

    adapter = demo_adapter(run_ms=500, analyze_ms=250, apply_ms=250)
    await fleet.start_tuning(write_tuning(tmp_path / "tuning", CASES, adapter=adapter))
    row = '#tunings tr[data-tuning="t1"]'
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        home = url.partition("?")[0]
        async with httpx.AsyncClient() as web:
            assert (await web.get(home)).status_code == 401
        await page.goto(url)
        assert page.url == home
        await expect(page.locator("#connection")).to_have_text("live")
        await expect(page.locator("#queue-depth")).to_have_text(str(len(CASES)))
        await expect(page.locator(f"{row} td.completed")).to_have_text("0")

        fleet.start_worker(concurrency=3)
        fleet.start_worker(concurrency=3)
        await expect(page.locator("#workers tbody tr[data-worker]")).to_have_count(2, timeout=WAIT_MS)
        await page.wait_for_function(RUNNING_AND_FINISHING, arg=COMPLETED // 4, timeout=WAIT_MS)
        running_shot = tmp_path / "running.png"
        await page.screenshot(path=str(running_shot), full_page=True)
        await expect(page.locator(f"{row} td.completed")).to_have_text(str(COMPLETED), timeout=WAIT_MS)
        await expect(page.locator(f"{row} td.difficult")).to_have_text("2", timeout=WAIT_MS)
        await expect(page.locator("#queue-depth")).to_have_text("0")
        # in progress counts the workers' presence too (every kind's jobs), which a worker renews every
        # few seconds: it reaches 0 at the first renewal after the last case ended
        await expect(page.locator("#in-progress")).to_have_text("0", timeout=WAIT_MS)
        points = await page.locator("#queue-chart polyline.queue").get_attribute("data-points")
        assert points is not None and int(points) >= 3
        ended = page.locator("#events tbody tr.kind-case_completed").first
        await expect(ended.locator("td.kind span.badge.completed")).to_have_text("case_completed")
        await expect(page.locator("#cases tbody tr[data-case]")).to_have_count(len(CASES), timeout=WAIT_MS)
        await expect(page.locator("#cases tbody tr.state-unfinished")).to_have_count(0, timeout=WAIT_MS)
        await expect(page.locator("#breaker")).to_have_text("closed")
        await expect(page.locator("#paused")).to_be_hidden()
        fleet_shot = tmp_path / "dashboard.png"
        await page.screenshot(path=str(fleet_shot), full_page=True)

        await page.locator("#cases a", has_text="two-applies").click()
        await expect(page.locator("#case-view")).to_be_visible()
        assert page.url.endswith("#/case/t1/two-applies")
        attempts = page.locator("#tries thead th[data-attempt]")
        await expect(attempts).to_have_text(["nomem 1", "nomem 2", "nomem 3", "mem 1"], timeout=WAIT_MS)
        verdicts = page.locator('#tries tr[data-row="verdict"] td')
        await expect(verdicts).to_have_text(["fail", "fail", "pass · done", "pass · done"])
        await expect(page.locator('#tries tr[data-row="rubric"] .score[data-item="correct"]')).to_have_count(
            4
        )
        applies = page.locator('#tries tr[data-row="apply"] td')
        await expect(applies.nth(0)).to_contain_text("published")
        await expect(page.locator('#tries tr[data-row="improvements"] td').first).to_contain_text("prose")
        await expect(page.locator("#case-outcome")).to_have_text("completed")
        await page.screenshot(path=str(tmp_path / "case.png"), full_page=True)

    assert fleet_shot.stat().st_size > 10_000 and running_shot.stat().st_size > 10_000


async def test_the_dashboard_shows_waits_and_the_lock_holder(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """The tunings row shows cases waiting for the lock and, once paused, for resume; the lock shows its
    holder's case and worker, not its fencing token."""
    from playwright.async_api import expect

    cases = [case("a", rules=["a-1", "a-2"]), case("b", rules=["b-1", "b-2"])]
    adapter = demo_adapter(run_ms=50, analyze_ms=50, apply_ms=2500)
    await fleet.start_tuning(write_tuning(tmp_path / "tuning", cases, adapter=adapter))
    running = '#tunings tr[data-tuning="t1"] td.running'
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        await page.goto(url)
        await expect(page.locator("#connection")).to_have_text("live")
        fleet.start_worker(concurrency=2)
        await expect(page.locator(running)).to_contain_text("1 waiting for the lock", timeout=WAIT_MS)
        (worker,) = (await client.status()).workers
        await expect(page.locator("#lock-detail")).to_contain_text(
            re.compile(rf"t1: [ab] r1 on {re.escape(worker.name)}"), timeout=WAIT_MS
        )
        await expect(page.locator('#tunings tr[data-tuning="t1"]')).to_contain_text(
            re.compile(rf"held by [ab] r1 on {re.escape(worker.name)}")
        )
        await client.pause()
        await expect(page.locator(running)).to_contain_text("2 waiting for resume", timeout=WAIT_MS)
        await client.resume()
        await expect(page.locator('#tunings tr[data-tuning="t1"] td.completed')).to_have_text(
            "2", timeout=WAIT_MS
        )


async def test_the_dashboard_shows_a_tunings_gates(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """With the gate on, keep-1 and keep-2 pass, then fixer's every apply breaks them: the tuning's row
    shows its gates (none under gate, none passed, both of fixer's candidates rejected)."""
    from playwright.async_api import expect

    keepers = [case("keep-1", forbids=["risky"]), case("keep-2", forbids=["risky"])]
    gate = {"cases": "passed", "sample": 10, "rule": "strict"}
    root = tmp_path / "tuning"
    tuning = write_tuning(root, keepers, adapter=demo_adapter(run_ms=100), gate=gate)
    fleet.start_worker(concurrency=3)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(2, timeout_s=60)
    (root / "cases" / "fixer.yaml").write_text(json.dumps(case("fixer", rules=["risky"])))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(3, timeout_s=90)
    cell = '#tunings tr[data-tuning="t1"] td.gates'
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        await page.goto(url)
        await expect(page.locator(cell)).to_contain_text("0 under gate · 0 passed · 2 rejected")
