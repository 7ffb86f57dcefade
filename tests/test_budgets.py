"""Budgets: a case stops at its budget before a step starts, a tuning at its budget is held (no run starts)
until resumed or given a larger budget, and usage no record keeps is counted all the same."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from service.client.client import TunefleetClient
from service.core import keys
from service.core.models.records import CaseResult, Spend
from service.core.settings import FleetSettings
from service.kinds.registry import slices
from service.metrics import FleetMetrics
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import (
    Fleet,
    case,
    demo_adapter,
    step_starts,
    wait_until,
    write_tuning,
)
from tests.support.tools import needs_module, needs_tool
from tests.test_dashboard_browser import browser_page, served
from workers.control import Controls

STEP_TOKENS = 1000
"""What every demo step reports (the cases' `tokens` knob); at the demo's default price, $0.002."""


def tokens_case(case_id: str, **demo: Any) -> dict[str, Any]:
    return case(case_id, tokens=STEP_TOKENS, **demo)


def cli(fleet: Fleet, *args: str) -> str:
    """Run `tunefleet ARGS` against the test's fleet; its standard output."""
    return tunefleet(*args, env=fleet_env(fleet.settings), check=True).stdout


def result_of(fleet: Fleet, case_id: str, tuning: str = "t1") -> CaseResult:
    path = fleet.settings.store / "tunings" / tuning / "cases" / case_id / "r1" / "result.json"
    return CaseResult.model_validate_json(path.read_text())


def run_starts(fleet: Fleet) -> int:
    return sum(1 for e in fleet.events() if e["kind"] == "step_started" and e["step"] == "run")


async def test_a_case_at_its_budget_ends_difficult_before_its_next_step_starts(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A case whose spend reached `case_max_tokens` ends `difficult: budget` naming what it spent, before
    the next run or analysis starts, and its result's usage is that spend."""
    cases = [tokens_case("needs-apply", rules=["needs-apply-a"]), tokens_case("passes")]
    tuning = write_tuning(tmp_path / "t", cases, adapter=demo_adapter(), budget={"case_max_tokens": 2500})
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=2)
    rows = await fleet.wait_finished(len(cases))
    # needs-apply: run, analysis (fail), apply = 3000 tokens; its second run never starts.
    assert rows["needs-apply"].state == "difficult"
    assert rows["needs-apply"].reason == "budget: spent 3000 tokens, $0.0060 of 2500 tokens"
    assert ("nomem", 2, "run") not in step_starts(fleet.events(), "needs-apply")
    # passes: run, analysis (pass), then the memory run = 3000 tokens; that run's analysis never starts.
    assert rows["passes"].reason == "budget: spent 3000 tokens, $0.0060 of 2500 tokens"
    assert result_of(fleet, "passes").phase == "mem"
    assert ("mem", 1, "analyze") not in step_starts(fleet.events(), "passes")
    for case_id in ("needs-apply", "passes"):
        usage = result_of(fleet, case_id).usage
        assert (usage.tokens, usage.cost_usd) == (3000, 0.006)


async def wait_held(fleet: Fleet) -> None:
    """Until the tuning is held and a run start waits for it."""

    await wait_until(
        lambda: any(e["kind"] == "run_waits_for_hold" for e in fleet.events()), 60, "a run held by the budget"
    )


async def test_a_tuning_at_its_budget_is_held_until_resumed_and_then_its_cases_finish(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A tuning whose spend reached `tuning_max_tokens` starts no run: status, --json, results and the
    metrics say it is held and why; `tunefleet resume TUNING` releases it and every case completes."""
    cases = [tokens_case(f"c{i}") for i in range(4)]
    tuning = write_tuning(tmp_path / "t", cases, budget={"tuning_max_tokens": 3000})
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=1)
    await wait_held(fleet)
    # One case ran all four steps (runs are held, analyses are not): 4000 tokens, then the hold.
    reason = "budget: spent 4000 tokens, $0.0080 of 3000 tokens"
    assert run_starts(fleet) == 2
    async with fleet.client() as client:
        status = await client.status()
        held = status.tunings[0].held
        assert held is not None and (held.kind, held.reason) == ("budget", reason)
        scraped = (
            await FleetMetrics(client.redis, fleet.settings.queue, slices(fleet.settings)).scrape()
        ).decode()
    assert f'tunefleet_tuning_held{{kind="budget",reason="{reason}",tuning="t1"}} 1.0' in scraped
    as_json = json.loads(cli(fleet, "status", "--json"))
    assert as_json["tunings"][0]["held"]["reason"] == reason
    assert "HELD t1 (budget)" in cli(fleet, "status")
    rows = json.loads(cli(fleet, "results", "t1", "--json"))
    waiting = [r for r in rows if r["state"] == "unfinished"]
    assert len(waiting) == 3 and {r["held"] for r in waiting} == {reason}

    assert "released t1" in cli(fleet, "resume", "t1")
    finished = await fleet.wait_finished(len(cases))
    assert {r.state for r in finished.values()} == {"completed"}
    async with fleet.client() as client:
        assert (await client.status()).tunings[0].held is None
        scraped = (
            await FleetMetrics(client.redis, fleet.settings.queue, slices(fleet.settings)).scrape()
        ).decode()
    assert "tunefleet_tuning_held{" not in scraped


async def test_registering_a_larger_budget_releases_a_held_tuning(fleet: Fleet, tmp_path: Path) -> None:
    """A held tuning registered again with a budget it has not reached is released, and its cases finish;
    one registered again with a budget still spent stays held."""
    cases = [tokens_case(f"c{i}") for i in range(3)]
    tuning = write_tuning(tmp_path / "t", cases, budget={"tuning_max_tokens": 3000})
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=1)
    await wait_held(fleet)
    async with fleet.client() as client:
        await client.register(write_tuning(tmp_path / "t", cases, budget={"tuning_max_tokens": 3500}))
        assert await client.hold("t1") is not None
        await client.register(write_tuning(tmp_path / "t", cases, budget={"tuning_max_usd": 1.0}))
        assert await client.hold("t1") is None
    finished = await fleet.wait_finished(len(cases))
    assert {r.state for r in finished.values()} == {"completed"}
    assert any(e["kind"] == "tuning_released" for e in fleet.events())


ANALYZER = r"""
import json, pathlib, sys
feedback, marker = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if not marker.exists():
    marker.write_text("refused once")
    usage = {"input_tokens": 300, "output_tokens": 200}
    feedback.write_text(json.dumps({"verdict": "maybe", "usage": usage}))
else:
    feedback.write_text(json.dumps({
        "verdict": "pass", "done": True, "rubric": {"correct": 1.0, "brief": 1.0},
        "usage": {"input_tokens": 60, "output_tokens": 40},
    }))
"""


async def test_an_analyzer_round_whose_feedback_was_refused_is_counted_in_the_case(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The usage an analyzer reported in feedback the fleet refused lands in the case's `spent.jsonl`, its
    result's usage and the tuning's tokens, though no record keeps it."""
    markers = tmp_path / "markers"
    markers.mkdir()
    analyzer = {
        "kind": "command",
        "timeout_s": 60,
        "argv": [
            sys.executable,
            "-c",
            ANALYZER.replace("{", "{{").replace("}", "}}"),
            "{feedback}",
            f"{markers}/{{phase}}-{{attempt}}",
        ],
    }
    tuning = write_tuning(tmp_path / "t", [tokens_case("graded")], analyzer=analyzer)
    await fleet.start_tuning(tuning)
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    assert rows["graded"].state == "completed"
    # Two runs (1000 each), two analyses: each one refused round (500) and one accepted (100).
    assert result_of(fleet, "graded").usage.tokens == 2 * 1000 + 2 * (500 + 100)
    ledger = fleet.settings.store / "tunings/t1/cases/graded/r1/spent.jsonl"
    spends = [Spend.model_validate_json(line) for line in ledger.read_text().splitlines()]
    assert [(s.phase, s.attempt, s.step, s.usage.tokens) for s in spends] == [
        ("nomem", 1, "analyze", 500),
        ("mem", 1, "analyze", 500),
    ]
    async with fleet.client() as client:
        assert int(await client.redis.hget(keys.stats("t1"), "tokens")) == 3200  # type: ignore[misc]


@needs_tool("chromium")
@needs_module("playwright")
@pytest.mark.timeout(120)
async def test_the_dashboard_shows_a_held_tuning_until_it_is_resumed(
    fleet: Fleet, settings: FleetSettings, tmp_path: Path
) -> None:
    """A hold set through `Controls.hold` shows on the dashboard's tuning row with its kind and reason, and
    goes once `resume(tuning)` releases it."""
    from playwright.async_api import expect

    await fleet.start_tuning(write_tuning(tmp_path / "t", [tokens_case("c0")]))
    badge = '#tunings tr[data-tuning="t1"] .held'
    async with TunefleetClient(settings) as client, served(client, settings) as url, browser_page() as page:
        assert await Controls(client.redis, settings.poll_delay_s).hold("t1", "auth", "the key was refused")
        await page.goto(url)
        await expect(page.locator(badge)).to_have_text("held: auth the key was refused")
        assert await client.resume("t1")
        await expect(page.locator(badge)).to_have_count(0)
