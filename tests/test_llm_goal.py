"""`kind: llm` goal steps against a real OpenAI-compatible server (tests/support/fake_openai.py): the
plan, review and work answers become the `out/` files the goal loop reads, an invalid answer gets one
repair round or is reported, and provider failures are reported as the case steps report them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter, ModelPrice
from service.kinds.goals.models import GoalStep
from service.kinds.goals.state import ProgressEntry, Review, WorkerResult
from service.kinds.goals.todo import parse_todo
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet
from tests.support.goals import start_goal, wait_goal_ended, wait_goal_shown_ended, write_goal
from workers.adapters.goal_base import GoalBrief, GoalStepExit, GoalStepRequest
from workers.adapters.llm.goal import LlmGoalAgent

KEY_ENV = "FAKE_OPENAI_KEY"
KEY = "sk-goal-5c1e08d2a9"
MODEL = "goal-model"
GOAL = "Write a haiku about Redis into poem.md"
CRITERION = "poem.md holds three lines of 5, 7 and 5 syllables"
TODO = "# Plan\n\n- [ ] T1: Draft the haiku\n- [ ] T2: Count the syllables\n"
REVIEW = {
    "decision": "continue",
    "complete": False,
    "summary": "The draft exists but is not counted.",
    "rationale": "The second criterion is unchecked.",
    "remaining_work": ["count the syllables of line 2"],
}
WORK = {
    "status": "partial",
    "summary": "Drafted; counting failed.",
    "tasks": [
        {"task": "T1", "status": "finished", "summary": "drafted three lines"},
        {"task": "T2", "status": "failed", "summary": "line 2 has 8 syllables"},
    ],
}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeOpenAI() as fake:
        yield fake


def config(server: FakeOpenAI) -> LlmAdapter:
    return LlmAdapter(
        base_url=server.base_url,
        model=MODEL,
        api_key_env=KEY_ENV,
        timeout_s=10,
        max_retries=1,
        retry_wait_min_s=0.01,
        retry_wait_max_s=1,
        prices={MODEL: ModelPrice(input_usd_per_1m=2.0, output_usd_per_1m=8.0)},
    )


def request(tmp_path: Path, step: GoalStep) -> GoalStepRequest:
    """A step of iteration 2 with the previous review's remaining work, a workspace and the step's inputs."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "poem.md").write_text("Keys in memory\n")
    inputs: dict[str, Path] = {}
    given = tmp_path / "given"
    given.mkdir(exist_ok=True)
    if step != "plan":
        inputs["todo"] = given / "TODO.md"
        inputs["todo"].write_text(TODO)
    if step == "review":
        for name, text in (
            ("worker_result", json.dumps({"status": "partial", "summary": "counted wrong"})),
            ("progress", '{"task": "T1", "event": "finished"}\n'),
            ("changes", "+++ b/poem.md\n+Keys in memory\n"),
        ):
            inputs[name] = given / name
            inputs[name].write_text(text)
    brief = GoalBrief(
        step=step,
        goal=GOAL,
        acceptance=[CRITERION],
        iteration=2,
        min_iterations=1,
        max_iterations=3,
        attempts_per_task=2,
        remaining_work=["fix the second line"],
        earlier=[{"iteration": 1, "status": "reviewed", "decision": "continue"}],
    )
    step_dir = tmp_path / f"{step}-7"
    return GoalStepRequest(
        goal_id="g1",
        step=step,
        iteration=2,
        step_dir=step_dir,
        log_file=step_dir / f"{step}.log",
        brief=brief,
        workspace_dir=workspace,
        system_dir=tmp_path / "no-system",
        inputs=inputs,
        demo={},
    )


async def step(server: FakeOpenAI, tmp_path: Path, name: GoalStep, *script: Scripted) -> GoalStepExit:
    server.play(*script)
    return await LlmGoalAgent(config(server)).goal_step(request(tmp_path, name))


def out(tmp_path: Path, name: GoalStep, file: str) -> str:
    return (tmp_path / f"{name}-7" / "out" / file).read_text()


async def test_a_plan_answer_becomes_the_todo(server: FakeOpenAI, tmp_path: Path) -> None:
    """The planner is asked in plain text with the goal, the criteria, the remaining work and the
    workspace; its fenced Markdown answer is out/TODO.md, which the fleet's TODO check accepts."""
    exit_ = await step(server, tmp_path, "plan", Reply(f"```markdown\n{TODO}```", 300, 30))
    assert exit_.error is None and exit_.exit_code == 0
    assert [t.id for t in parse_todo(out(tmp_path, "plan", "TODO.md"))] == ["T1", "T2"]
    [asked] = server.requests
    assert "response_format" not in asked.body
    for quoted in (GOAL, CRITERION, "fix the second line", "poem.md", "Keys in memory"):
        assert quoted in asked.text, quoted
    assert exit_.spent == Usage(input_tokens=300, output_tokens=30, cost_usd=0.00084, source="api")


async def test_an_invalid_plan_is_repaired_once_naming_the_problem(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A TODO with no task is sent back once quoting the fleet's objection; the repaired TODO is kept and
    the usage sums both calls."""
    exit_ = await step(server, tmp_path, "plan", Reply("Nothing to do yet."), Reply(TODO))
    assert exit_.error is None and len(server.requests) == 2
    assert "no tasks" in server.requests[1].body["messages"][-1]["content"]
    assert out(tmp_path, "plan", "TODO.md") == TODO
    assert exit_.spent is not None and exit_.spent.input_tokens == 200


async def test_a_review_answer_becomes_review_json(server: FakeOpenAI, tmp_path: Path) -> None:
    """The reviewer is asked for the Review JSON Schema with the TODO, the worker's result, its progress
    and the changes; its answer is out/review.json."""
    exit_ = await step(server, tmp_path, "review", Reply(json.dumps(REVIEW)))
    assert exit_.error is None
    assert Review.model_validate_json(out(tmp_path, "review", "review.json")) == Review(**REVIEW)
    [asked] = server.requests
    assert asked.format_type == "json_schema" and asked.schema_name == "review"
    schema = asked.body["response_format"]["json_schema"]["schema"]
    assert set(schema["required"]) == {"decision", "complete", "summary", "rationale"}
    for quoted in (
        "- [ ] T2: Count the syllables",
        "counted wrong",
        '"event": "finished"',
        "+Keys in memory",
    ):
        assert quoted in asked.text, quoted


async def test_a_review_still_invalid_after_the_repair_is_reported(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A review missing `complete` twice is written as it is (the fleet records the iteration's failure)
    and the step's error names the field."""
    bad = json.dumps({k: v for k, v in REVIEW.items() if k != "complete"})
    exit_ = await step(server, tmp_path, "review", Reply(bad), Reply(bad))
    assert len(server.requests) == 2 and exit_.exit_code == 1
    assert exit_.error is not None and "complete" in exit_.error and "repair" in exit_.error
    assert json.loads(out(tmp_path, "review", "review.json")) == json.loads(bad)


async def test_a_work_answer_becomes_the_worker_files(server: FakeOpenAI, tmp_path: Path) -> None:
    """The worker's answer becomes worker_result.json, a started and an ending progress line per task, and
    task_results.json; the workspace is left as it was."""
    exit_ = await step(server, tmp_path, "work", Reply(json.dumps(WORK)))
    assert exit_.error is None
    result = WorkerResult.model_validate_json(out(tmp_path, "work", "worker_result.json"))
    assert (result.status, result.summary, result.task_results) == (
        "partial",
        WORK["summary"],
        "task_results.json",
    )
    progress = [
        ProgressEntry.model_validate_json(line)
        for line in out(tmp_path, "work", "progress.jsonl").splitlines()
    ]
    assert [(p.task, p.event) for p in progress] == [
        ("T1", "started"),
        ("T1", "finished"),
        ("T2", "started"),
        ("T2", "failed"),
    ]
    assert json.loads(out(tmp_path, "work", "task_results.json")) == WORK["tasks"]
    assert "- [ ] T1: Draft the haiku" in server.requests[0].text
    assert (tmp_path / "workspace" / "poem.md").read_text() == "Keys in memory\n"


async def test_provider_failures_are_reported_as_for_the_case_steps(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider down through its retries is provider_down, a refused key key_refused (never the key
    itself), a missing key variable a void step; none writes an output file."""
    down = await step(server, tmp_path / "a", "review", Status(503), Status(503))
    assert down.provider_down is not None and "503" in down.provider_down and down.exit_code == 1
    refused = await step(server, tmp_path / "b", "plan", Status(401, message=f"bad key {KEY}"))
    assert refused.key_refused is not None and KEY_ENV in refused.key_refused
    assert KEY not in refused.key_refused
    monkeypatch.delenv(KEY_ENV)
    missing = await step(server, tmp_path / "c", "work")
    assert missing.void is not None and KEY_ENV in missing.void and len(server.requests) == 3
    for root, name in ((tmp_path / "a", "review"), (tmp_path / "b", "plan"), (tmp_path / "c", "work")):
        assert list((root / f"{name}-7" / "out").iterdir()) == []


def goal_model(body: dict[str, Any]) -> Scripted:
    """The fleet test's model: a TODO for a plain prompt, the work answer, a complete review."""
    kind = body.get("response_format", {}).get("json_schema", {}).get("name")
    if kind == "review":
        return Reply(json.dumps({**REVIEW, "decision": "complete", "complete": True, "remaining_work": []}))
    if kind == "work":
        return Reply(json.dumps(WORK))
    return Reply(TODO)


async def test_an_llm_goal_runs_on_a_real_fleet(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A goal whose runner and analyzer are `kind: llm` plans, works and is reviewed complete by a real
    worker, which sends the key only to the provider; the iteration records the model's TODO, result and
    review."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FakeOpenAI(responder=goal_model) as server:
        llm = config(server).model_dump(mode="json")
        await start_goal(fleet, write_goal(tmp_path / "goals", runner=llm, analyzer=llm))
        fleet.start_worker(2, **{KEY_ENV: KEY})
        state = await wait_goal_ended(fleet)
    assert state.status == "completed", state.completion
    [it] = state.iterations
    assert it.plan is not None and [t.id for t in it.plan.tasks] == ["T1", "T2"]
    assert it.work is not None and (it.work.tasks_finished, it.work.tasks_failed) == (1, 1)
    assert it.review is not None and it.review.review.complete
    assert [r.schema_name for r in server.requests] == [None, "work", "work", "review"]  # T2's 2nd attempt
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert KEY not in fleet.log_of(0)
    assert it.spent.source == "api" and it.spent.tokens > 0
    assert state.spent == it.spent
    await wait_goal_shown_ended(fleet)
    async with fleet.client() as client:
        [summary] = await client.goals.summaries()
    assert (summary.tokens, summary.cost_usd) == (state.spent.tokens, state.spent.cost_usd)
