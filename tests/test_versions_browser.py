"""The dashboard's Versions page in a real headless Chromium, served by a real uvicorn, on a tuning the
fleet ran with its gate: reached from the tuning's row, it draws the timeline (every evaluation's pass
rate with its interval, the size by version), lists the versions and the rejected candidates, and opens
one's diff, feedback and gate evidence. Needs chromium and playwright (as tests/test_dashboard_browser.py);
its screenshot is kept as docs/versions.png."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from service.client.client import TunefleetClient
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning
from tests.support.tools import needs_module, needs_tool
from tests.test_dashboard_browser import WAIT_MS, browser_page, served

WRITE = "tf-versions-write-8e1f"
pytestmark = [needs_tool("chromium"), needs_module("playwright"), pytest.mark.timeout(240)]


async def test_the_versions_page_shows_the_timeline_and_opens_a_diff(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """From the tunings row's `versions` link: the chart has a dot and an interval per evaluation and a
    size mark per version; the list holds the import, the published edit and fixer's rejected candidates;
    opening the published edit shows its added rule as a green diff line and its feedback, opening a
    rejected candidate its rule, the gate's verdict and each gate item."""
    from playwright.async_api import expect

    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    keepers = [
        case("keep-1", forbids=["risky"]),
        case("keep-2", forbids=["risky"]),
        case("adds", rules=["greet"]),
    ]
    adapter = demo_adapter(run_ms=100, analyze_ms=10, apply_ms=10)
    tuning = write_tuning(
        root, keepers, adapter=adapter, gate={"cases": "passed", "sample": 10, "rule": "strict"}
    )
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(3, timeout_s=60)
    (root / "cases" / "fixer.yaml").write_text(yaml.safe_dump(case("fixer", rules=["risky"])))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(4, timeout_s=90)
    files = EvalFiles(Store(settings.store))
    async with TunefleetClient(settings) as client:
        for name, version in (("before", "initial"), ("after", "main")):
            spec = await client.evals.create("t1", version=version, name=name)
            await wait_until(lambda: files.results(spec.id).done == spec.total, 60, f"evaluation {name}")  # noqa: B023
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        await page.goto(url)
        await page.locator('#tunings tr[data-tuning="t1"] a.versions-link').click(timeout=WAIT_MS)
        await expect(page.locator("#versions-view")).to_be_visible()
        assert page.url.endswith("#/versions/t1")
        rows = page.locator("#versions tbody tr[data-version]")
        await expect(rows).to_have_count(4, timeout=WAIT_MS)
        await expect(page.locator("#versions tbody tr.status-rejected")).to_have_count(2)
        await expect(page.locator("#versions tbody tr.status-initial")).to_have_count(1)
        published = page.locator("#versions tbody tr.status-published")
        await expect(published).to_contain_text("adds r1/nomem/1")
        await expect(page.locator("#versions-chart circle.size")).to_have_count(4)
        await expect(page.locator('#versions-chart circle.rate[data-eval="before"]')).to_have_count(1)
        await expect(page.locator('#versions-chart circle.rate[data-eval="after"]')).to_have_count(1)
        assert await page.locator("#versions-chart line.interval").count() >= 4  # two user evals, the gates'
        await published.locator("button.open").click()
        detail = page.locator("#version-detail section[data-version]")
        await expect(detail.locator(".diff .line.add", has_text="greet")).not_to_have_count(
            0, timeout=WAIT_MS
        )
        await expect(detail).to_contain_text("feedback: fail")
        await page.locator("#versions tbody tr.status-rejected button.open").first.click()
        rejected = page.locator("#version-detail section[data-version]")
        await expect(rejected.locator(".diff .line.add", has_text="risky")).not_to_have_count(
            0, timeout=WAIT_MS
        )
        await expect(rejected).to_contain_text("gate: rejected")
        await expect(rejected.locator(".gate-items li")).to_have_count(3)
        shot = tmp_path / "versions.png"
        await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


async def test_a_waiting_candidate_is_approved_from_the_versions_page(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """With `gate.approval: manual`, the waiting candidate's row has approve and reject buttons; approve
    asks for the write token once, then the candidate is published and the list shows it so."""
    from playwright.async_api import Dialog, expect

    fleet.start_worker(concurrency=2)
    root = tmp_path / "t"
    gate = {"cases": "passed", "sample": 10, "rule": "strict", "approval": "manual"}
    tuning = write_tuning(root, [case("keep-1")], adapter=demo_adapter(run_ms=50), gate=gate)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(1, timeout_s=60)
    (root / "cases" / "adds.yaml").write_text(yaml.safe_dump(case("adds", rules=["greet"])))
    await fleet.start_tuning(tuning)
    writable = settings.model_copy(update={"api_token": SecretStr(WRITE)})
    asked: list[str] = []

    async def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept(WRITE)

    async with TunefleetClient(settings) as client, served(client, writable) as url, browser_page() as page:
        page.on("dialog", answer)
        await page.goto(url)
        await page.locator('#tunings tr[data-tuning="t1"] a.versions-link').click(timeout=WAIT_MS)
        waiting = page.locator("#versions tbody tr.status-candidate")
        await expect(waiting.locator("button.approve")).to_have_count(1, timeout=WAIT_MS)
        await waiting.locator("button.approve").click()
        await expect(page.locator("#versions tbody tr.status-published")).to_have_count(1, timeout=WAIT_MS)
        await expect(page.locator("#versions tbody tr.status-candidate")).to_have_count(0)
    rows = await fleet.wait_finished(2, timeout_s=60)
    assert rows["adds"].state == "completed"
    assert len(asked) == 1 and "write token" in asked[0]
