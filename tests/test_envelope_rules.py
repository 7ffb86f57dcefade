"""The rules the job envelope (workers/envelope.py) holds for every kind of job, one test per rule, each
run for a case, a goal and an evaluation item on a real fleet: a refused key holds the tuning, a
provider outage hands the job back without spending a try, budgets, pause, the breaker, SIGTERM,
poison, and the spend of a step cut short."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from service.core.models.status import Hold
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, demo_adapter, wait_until
from tests.support.goals import goal_state
from tests.support.kinds import KINDS, Kind

KEY_ENV = "FAKE_OPENAI_KEY"
KEY = "sk-rules-4d1f7a0c93"
MODEL = "rules-model"
RETRY_S = "0.3"
PASS = {"verdict": "pass", "done": True, "rubric": {"correct": 1.0, "brief": 1.0}, "summary": "It is right."}
REVIEW = {"decision": "complete", "complete": True, "summary": "done", "rationale": "T1 is done"}
TODO = "- [ ] T1: do the one task\n"

EVERY_KIND = pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
STARTS_AGAIN = [k for k in KINDS if k.name != "eval_item"]
"""The kinds whose job starts a step after another: an eval item has one run, after which nothing of it
starts, so a hold on its tuning's budget holds the items that start after the spend instead
(tests/test_eval_fleet.py, the tuning's budget)."""


def llm(server: FakeOpenAI) -> dict[str, Any]:
    """The meta agent's config: one attempt per call (no retry), priced."""
    return {
        "kind": "llm",
        "base_url": server.base_url,
        "model": MODEL,
        "api_key_env": KEY_ENV,
        "timeout_s": 10,
        "max_retries": 0,
        "prices": {MODEL: {"input_usd_per_1m": 2.0, "output_usd_per_1m": 8.0}},
    }


def meta(server: FakeOpenAI) -> dict[str, Any]:
    """A tuning whose runner is the demo agent and whose meta agent (a case's analyzer and applier, a
    goal's planner and reviewer) is `server`."""
    return {"analyzer": llm(server), "applier": llm(server)}


def answer(body: dict[str, Any]) -> Reply:
    """The meta agent's right answer: a TODO to a plan (plain text), a complete review, a pass."""
    fmt = body.get("response_format")
    if fmt is None:
        return Reply(TODO)
    return Reply(json.dumps(REVIEW if fmt["json_schema"]["name"] == "review" else PASS))


def events(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [e for e in fleet.events() if e["kind"] == kind]


def tries(fleet: Fleet, kind: Kind) -> int:
    """The tries the job spent before it passed: a case's tries without memory, a goal's iterations, an
    eval item's tries (its one, and any set aside)."""
    if kind.name == "case":
        nomem = fleet.settings.store / "tunings/t1/cases/c1/r1/nomem"
        return sum(1 for p in nomem.glob("*") if p.name.isdigit())
    if kind.name == "eval_item":
        return sum(1 for _ in (fleet.settings.store / "evals/e1/items/c1").glob("1*/run.json"))
    state = goal_state(fleet)
    return len(state.iterations) if state else 0


async def wait_held(fleet: Fleet) -> Hold:
    """The tuning's hold, once status shows one."""
    async with fleet.client() as client:
        began = time.monotonic()
        while (held := (await client.status()).tunings[0].held) is None:
            assert time.monotonic() - began < 30, "the tuning was never held"
            await asyncio.sleep(0.05)
    return held


@EVERY_KIND
async def test_a_refused_key_holds_the_tuning_until_resume(fleet: Fleet, tmp_path: Path, kind: Kind) -> None:
    """A 401 fails nothing: the job's tuning is held (kind auth, the key not in the reason), the job is
    handed back and its provider asked nothing more until `resume`; then the job completes."""
    refusing = True
    refused = 0

    def responder(body: dict[str, Any]) -> Scripted:
        nonlocal refused
        if refusing:
            refused += 1
            return Status(401, message="invalid api key")
        return answer(body)

    with FakeOpenAI(responder=responder) as server:
        await kind.start(fleet, tmp_path, config=meta(server))
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": RETRY_S})
        held = await wait_held(fleet)
        assert held.kind == "auth" and server.base_url in held.reason and KEY not in held.reason
        assert kind.ended(fleet) is None
        refusing = False
        async with fleet.client() as client:
            assert await client.resume("t1")
        done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason
    assert refused == 1  # held at once: the provider was asked nothing more until the resume
    assert kind.marks(fleet) == [] and tries(fleet, kind) == 1


@EVERY_KIND
async def test_a_provider_outage_hands_the_job_back_without_spending_a_try(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """While the meta agent's provider answers only 503 the job is handed back, deferred by
    provider_retry_s, with a `provider_down` event; once it answers, the job completes with no try spent
    and nothing set aside."""
    down = True

    def responder(body: dict[str, Any]) -> Scripted:
        return Status(503) if down else answer(body)

    with FakeOpenAI(responder=responder) as server:
        await kind.start(fleet, tmp_path, config=meta(server))
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": RETRY_S})
        await wait_until(lambda: len(events(fleet, "provider_down")) >= 2, 60, "two hand-backs")
        assert kind.ended(fleet) is None
        down = False
        done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason
    first = events(fleet, "provider_down")[0]
    assert "503" in first["detail"] and first["data"]["retry_in_s"] == float(RETRY_S)
    assert kind.marks(fleet) == [] and tries(fleet, kind) == 1


@EVERY_KIND
async def test_a_job_at_its_budget_ends_before_its_next_step(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """A job whose spend reached its tuning's per-job budget (`case_max_tokens`) ends before its next
    step starts (a case `difficult`, a goal `incomplete`), naming what it spent; its totals are that spend."""
    # a case: run, analysis (fail), apply; a goal: plan, work, review (not complete): 3000 tokens each;
    # an eval item (a run and a grade, nothing after): its run's 1000 tokens
    steps = 1 if kind.name == "eval_item" else 3
    limit = steps * 1000 - 500
    config = {"budget": {"case_max_tokens": limit}}
    await kind.start(fleet, tmp_path, tokens=1000, config=config, **_unfinished(kind))
    fleet.start_worker()
    done = await kind.wait_ended(fleet)
    assert done.state == {"case": "difficult", "goal": "incomplete", "eval_item": "failed"}[kind.name]
    assert done.reason == f"budget: spent {steps}000 tokens, ${steps * 0.002:.4f} of {limit} tokens"
    assert done.tokens == steps * 1000
    assert len(events(fleet, "step_started")) == steps  # the next step never started


def _unfinished(kind: Kind) -> dict[str, Any]:
    """Knobs that keep the job from ending after three steps: a case needs an apply, a goal's first
    review does not complete it."""
    return {"complete_at": 9} if kind.name == "goal" else {"rules": ["c1-a"]}


@pytest.mark.parametrize("kind", STARTS_AGAIN, ids=[k.name for k in STARTS_AGAIN])
async def test_a_tuning_at_its_budget_holds_the_job_until_resumed(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """A job whose tuning spent its budget (`tuning_max_tokens`, counted from the job's own events) waits at
    its next start, held; `tunefleet resume TUNING` releases it and it completes."""
    await kind.start(fleet, tmp_path, tokens=1000, config={"budget": {"tuning_max_tokens": 1500}})
    fleet.start_worker()
    held = await wait_held(fleet)
    assert (held.kind, held.reason) == ("budget", "budget: spent 2000 tokens, $0.0040 of 1500 tokens")
    assert kind.ended(fleet) is None
    async with fleet.client() as client:
        assert await client.resume("t1")
    done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason


@EVERY_KIND
async def test_a_paused_fleet_holds_the_job_until_resume(fleet: Fleet, tmp_path: Path, kind: Kind) -> None:
    """With the fleet paused, a job taken by a worker starts no agent and says it waits; `resume` lets it
    go on to completion."""
    async with fleet.client() as client:
        await client.pause()
    await kind.start(fleet, tmp_path)
    fleet.start_worker()
    waits = {"goal": "step_waits_for_resume"}.get(kind.name, "run_waits_for_resume")
    await wait_until(lambda: bool(events(fleet, waits)), 30, "the job to wait for resume")
    assert events(fleet, "step_started") == []
    async with fleet.client() as client:
        await client.resume()
    done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason


@EVERY_KIND
async def test_an_open_breaker_holds_the_job_and_marks_nothing(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """A sandbox down at the job's first agent opens the fleet's breaker; the job waits, nothing is set
    aside or marked, and once a probe finds the sandbox up the job completes."""
    outage = tmp_path / "sandbox-down"
    outage.touch()
    await kind.start(fleet, tmp_path, config={"adapter": demo_adapter(outage_file=str(outage))})
    fleet.start_worker()
    await wait_until(lambda: bool(events(fleet, "breaker_opened")), 30, "the breaker to open")
    assert kind.ended(fleet) is None
    outage.unlink()
    done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason
    assert len(events(fleet, "breaker_opened")) == 1 and len(events(fleet, "breaker_closed")) == 1
    assert kind.marks(fleet) == [] and tries(fleet, kind) == 1


@EVERY_KIND
async def test_sigterm_hands_the_job_back_and_another_worker_ends_it(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """SIGTERM while the job's agent runs: the worker exits in time, the job goes back to the queue
    (`<kind>_requeued`), loses no lease, and another worker completes it with nothing marked."""
    await kind.start(fleet, tmp_path, step_ms=1500)
    first = fleet.start_worker()
    await wait_until(lambda: bool(events(fleet, "step_started")), 30, "the first step to start")
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=fleet.settings.stop_grace_s + 10) == 0
    assert len(events(fleet, f"{kind.name}_requeued")) == 1
    fleet.start_worker()
    done = await kind.wait_ended(fleet)
    assert done.state == "completed", done.reason
    assert events(fleet, "lease_lost") == [] and kind.marks(fleet) == []


@EVERY_KIND
async def test_a_job_that_keeps_killing_its_worker_ends_failed_as_poison(
    fleet: Fleet, tmp_path: Path, kind: Kind
) -> None:
    """A job whose agent takes its worker down every time ends failed after max_lease_losses lost leases."""
    fleet.settings = fleet.settings.model_copy(update={"max_lease_losses": 2})
    await kind.start(fleet, tmp_path, kills_worker=10)
    for _ in range(4):
        worker = fleet.start_worker()

        def settled(w: subprocess.Popen[bytes] = worker) -> bool:
            return w.poll() is not None or kind.ended(fleet) is not None

        await wait_until(settled, 30, "the worker to die or the job to end")
        if kind.ended(fleet) is not None:
            break
    done = kind.ended(fleet)
    assert done is not None and done.state == "failed"
    assert done.reason == f"poison: the {kind.name} lost its lease 2 times"


@EVERY_KIND
@pytest.mark.parametrize("way", ["cancel", "outage"])
async def test_what_a_step_cut_short_was_billed_is_in_the_jobs_totals(
    fleet: Fleet, tmp_path: Path, kind: Kind, way: str
) -> None:
    """The meta agent's first answer is billed and refused, and its repair is cut short: by a cancel
    (the job ends `cancelled`) or by the provider going down (the job is handed back, then completes).
    Either way every token the provider billed is in the job's totals."""
    calls = 0
    billed: list[int] = []

    def responder(body: dict[str, Any]) -> Scripted:
        nonlocal calls
        calls += 1
        if calls == 2 and way == "outage":
            return Status(503)
        if calls == 2:
            return Reply("{}", delay_s=120)  # never answered: the cancel comes first
        reply = Reply("not what was asked for", 300, 40) if calls == 1 else answer(body)
        billed.append(reply.prompt_tokens + reply.completion_tokens)
        return reply

    with FakeOpenAI(responder=responder) as server:
        await kind.start(fleet, tmp_path, config=meta(server))
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": RETRY_S})
        await wait_until(lambda: len(server.requests) >= 2, 30, "the repair call")
        if way == "cancel":
            await kind.cancel(fleet)
        done = await kind.wait_ended(fleet)
    assert done.state == {"cancel": "cancelled", "outage": "completed"}[way], done.reason
    assert billed[0] == 340 and done.tokens == sum(billed)
