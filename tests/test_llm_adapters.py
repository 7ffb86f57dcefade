"""`kind: llm` analyzer and applier against a real OpenAI-compatible server (tests/support/fake_openai.py):
in-process for the protocol (retries, fallbacks, repairs, usage), and in a real fleet end to end."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from redis.asyncio import Redis

from service.core import keys
from service.core.errors import ConfigError
from service.core.io.files import read_model
from service.core.models.case import Case, RubricItem
from service.core.models.records import Feedback, Improvement, RunOutput, RunRecord, Usage
from service.core.models.tuning import LlmAdapter, ModelPrice, TuningConfig
from tests.support.fake_openai import Drop, FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, event_time_s, wait_until, write_tuning
from tests.support.ports import free_port
from tests.support.raw_http import read_request
from tests.support.redis_server import RedisServer
from workers.adapters.base import (
    AnalyzeOutcome,
    AnalyzeRequest,
    ApplyOutcome,
    ApplyRequest,
    RunOutcome,
    RunRequest,
)
from workers.adapters.factory import build_analyzer, build_applier, build_prober, build_runner
from workers.adapters.llm.analyzer import LlmAnalyzer
from workers.adapters.llm.applier import LlmApplier
from workers.adapters.llm.limits import PERMIT_LEASE_S, ProviderLimits
from workers.adapters.llm.pool import Providers
from workers.adapters.llm.runner import LlmRunner
from workers.adapters.process import AgentHost

KEY_ENV = "FAKE_OPENAI_KEY"
KEY = "sk-test-7f3a9c2e51d84b06"
MODEL = "tune-model"
RUBRIC_TEXT = "The answer greets the user by name."
RULES = "# Rules\n\n- rule: base\n"
FAIL = json.dumps(
    {
        "verdict": "fail",
        "done": False,
        "rubric": {"greets": 0.0},
        "improvements": [
            {"target": "prose", "change": "Add a greeting rule\nThe prose never asks to greet."}
        ],
        "summary": "The run did not greet.",
    }
)
PASS = json.dumps({"verdict": "pass", "done": True, "rubric": {"greets": 1.0}, "summary": "It greets."})
GREET_EDIT = {"file": "rules.md", "old": "- rule: base\n", "new": "- rule: base\n- rule: greet\n"}
EDITS = json.dumps({"edits": [GREET_EDIT], "skills": [], "summary": "added the greeting rule"})


def cost(input_tokens: int, output_tokens: int) -> float:
    """The price of MODEL in config(): 2 USD per 1M input tokens, 8 per 1M output tokens."""
    return round((input_tokens * 2.0 + output_tokens * 8.0) / 1_000_000, 6)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeOpenAI() as fake:
        yield fake


def config(server: FakeOpenAI, **extra: Any) -> LlmAdapter:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "model": MODEL,
        "api_key_env": KEY_ENV,
        "timeout_s": 10,
        "max_retries": 2,
        "retry_wait_min_s": 0.01,
        "retry_wait_max_s": 5,
        "prices": {MODEL: ModelPrice(input_usd_per_1m=2.0, output_usd_per_1m=8.0)},
        **extra,
    }
    return LlmAdapter.model_validate(settings)


def the_case() -> Case:
    return Case(id="c1", input="Greet Ada.", rubric=[RubricItem(id="greets", text=RUBRIC_TEXT)])


def step_fields(tmp_path: Path, step: str) -> dict[str, Any]:
    step_dir = tmp_path / f"{step}-lease"
    return {
        "tuning": "t1",
        "case_id": "c1",
        "phase": "nomem",
        "attempt": 1,
        "attempt_dir": tmp_path,
        "step_dir": step_dir,
        "log_file": step_dir / f"{step}.log",
        "demo": {},
    }


def analyze_request(tmp_path: Path) -> AnalyzeRequest:
    (tmp_path / "system").mkdir(parents=True)
    (tmp_path / "system" / "rules.md").write_text(RULES)
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "draft.txt").write_text("Hello? (draft)\n")
    run = RunRecord(
        version="v1",
        work="run-lease",
        started_at=datetime.now(UTC),
        duration_ms=5,
        exit_code=0,
        output=RunOutput(answer="Here is the weather."),
    )
    return AnalyzeRequest(
        **step_fields(tmp_path, "analyze"),
        case=the_case(),
        run=run,
        system_dir=tmp_path / "system",
        memory_dir=tmp_path / "memory",
        workspace_dir=tmp_path / "workspace",
    )


def apply_request(tmp_path: Path) -> ApplyRequest:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "rules.md").write_text(RULES)
    feedback = Feedback(
        verdict="fail",
        done=False,
        improvements=[Improvement(target="prose", change="Add a greeting rule\nSay hello first.")],
    )
    return ApplyRequest(
        **step_fields(tmp_path, "apply"), case=the_case(), feedback=feedback, worktree_dir=tmp_path / "tree"
    )


async def analyze(server: FakeOpenAI, tmp_path: Path, *script: Scripted, **extra: Any) -> AnalyzeOutcome:
    server.play(*script)
    return await LlmAnalyzer(config(server, **extra)).analyze(analyze_request(tmp_path))


async def apply(server: FakeOpenAI, tmp_path: Path, *script: Scripted) -> ApplyOutcome:
    server.play(*script)
    return await LlmApplier(config(server)).apply(apply_request(tmp_path))


def feedback_of(outcome: AnalyzeOutcome) -> Feedback:
    assert outcome.exit.error is None and outcome.feedback is not None, outcome.exit.error
    return Feedback.model_validate_json(outcome.feedback)


async def test_the_analyzer_asks_with_the_case_the_run_and_the_feedback_schema(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The analyzer's one request carries the key, the rubric, the run and its workspace, and the
    Feedback schema without the fleet's fields; prompt and answer are kept in the step's folder."""
    feedback = feedback_of(await analyze(server, tmp_path, Reply(FAIL, 900, 120)))
    assert feedback.verdict == "fail" and feedback.usage == Usage(
        input_tokens=900, output_tokens=120, cost_usd=cost(900, 120), source="api"
    )
    [request] = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == MODEL and request.format_type == "json_schema"
    spec = request.body["response_format"]["json_schema"]
    assert spec["name"] == "feedback" and spec["strict"] is False
    passing, other = spec["schema"]["anyOf"]
    for variant in (passing, other):
        assert set(variant["properties"]) == {"verdict", "done", "rubric", "improvements", "summary", "infra"}
        assert variant["properties"]["rubric"]["required"] == ["greets"]
        assert variant["properties"]["rubric"]["additionalProperties"] is False
    ties = [(v["properties"]["verdict"], v["properties"]["done"]["const"]) for v in (passing, other)]
    assert ties == [
        ({"type": "string", "const": "pass"}, True),
        ({"type": "string", "enum": ["fail", "void"]}, False),
    ]
    for quoted in (
        RUBRIC_TEXT,
        "`greets`",
        "Here is the weather.",
        "draft.txt",
        "Hello? (draft)",
        "- rule: base",
    ):
        assert quoted in request.text, quoted
    step_dir = tmp_path / "analyze-lease"
    assert RUBRIC_TEXT in (step_dir / "prompt-1.md").read_text()
    assert json.loads((step_dir / "answer-1.json").read_text())["usage"]["prompt_tokens"] == 900
    assert KEY not in (step_dir / "analyze.log").read_text()


async def test_a_429_is_tried_again_after_its_retry_after(server: FakeOpenAI, tmp_path: Path) -> None:
    """A 429 with Retry-After: 0.4 is waited out (at least 0.4 s) and the call tried again."""
    feedback = feedback_of(
        await analyze(server, tmp_path, Status(429, retry_after="0.4"), Reply(FAIL, 100, 20))
    )
    first, second = server.requests
    assert second.at - first.at >= 0.4
    assert feedback.usage.tokens == 120


async def test_retry_after_is_capped_by_retry_wait_max_s(server: FakeOpenAI, tmp_path: Path) -> None:
    """A Retry-After of an hour waits only retry_wait_max_s."""
    outcome = await analyze(
        server, tmp_path, Status(429, retry_after="3600"), Reply(FAIL), retry_wait_max_s=0.1
    )
    first, second = server.requests
    assert feedback_of(outcome).verdict == "fail" and second.at - first.at < 5


@pytest.mark.parametrize("fault", [Status(500), Status(503), Drop()], ids=["500", "503", "dropped"])
async def test_a_server_error_or_a_dropped_connection_is_tried_again(
    server: FakeOpenAI, tmp_path: Path, fault: Scripted
) -> None:
    """A 5xx answer or a connection dropped mid-answer is tried again, and the second answer counts; the
    dropped one, which the server may bill, is counted too: its prompt, estimated."""
    feedback = feedback_of(await analyze(server, tmp_path, fault, Reply(PASS, 50, 5)))
    assert feedback.verdict == "pass" and len(server.requests) == 2
    if isinstance(fault, Status):
        assert feedback.usage == Usage(input_tokens=50, output_tokens=5, cost_usd=cost(50, 5), source="api")
        return
    estimated = feedback.usage.estimated_tokens
    assert estimated >= len(server.requests[0].text) // 4 and feedback.usage.source == "api"
    assert (feedback.usage.input_tokens, feedback.usage.output_tokens) == (50 + estimated, 5)
    assert feedback.usage.cost_usd == cost(50 + estimated, 5)


async def test_a_provider_down_through_every_attempt_is_the_steps_error(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """After max_retries + 1 failing attempts the analyzer reports the provider unavailable, as an outage
    of the infrastructure (`infra`), with no feedback."""
    outcome = await analyze(server, tmp_path, Status(503), Status(503), Status(503), Reply(PASS))
    assert outcome.feedback is None and len(server.requests) == 3
    assert outcome.exit.provider_down is not None and outcome.exit.provider_down == outcome.exit.error
    assert (outcome.exit.error or "").startswith("provider unavailable after 3 attempts:")
    assert "503" in (outcome.exit.error or "")


async def test_a_connection_nobody_accepts_is_an_outage_that_spent_nothing(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Attempts that never reached a server (nothing listens on its port) make the provider unavailable
    (`infra`) and count no tokens, estimated or not: unlike a dropped answer, nobody can bill them."""
    dead = config(server).model_copy(update={"base_url": f"http://127.0.0.1:{free_port()}/v1"})
    outcome = await LlmAnalyzer(dead).analyze(analyze_request(tmp_path))
    assert outcome.feedback is None and outcome.exit.provider_down is not None
    assert (outcome.exit.error or "").startswith("provider unavailable after 3 attempts: cannot reach")
    assert outcome.exit.spent is None or outcome.exit.spent.tokens == 0, outcome.exit.spent


async def test_a_connection_closed_before_the_answer_is_counted_as_billed(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A server that reads the whole request, then closes the connection without a word, may bill it:
    each attempt's prompt is counted, estimated, though the SDK files the drop as a connection timeout."""
    requests = 0

    async def read_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        head = await read_request(reader)
        requests += head.startswith(b"POST /v1/chat/completions ")  # not the tokenizer's probes
        writer.close()

    silent = await asyncio.start_server(read_then_close, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    async with silent:
        cut = config(server).model_copy(update={"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 1})
        outcome = await LlmAnalyzer(cut).analyze(analyze_request(tmp_path))
    assert outcome.feedback is None and outcome.exit.provider_down is not None and requests == 2
    spent = outcome.exit.spent
    assert spent is not None and spent.source == "estimated" and spent.estimated_tokens > 0, spent


async def test_a_refused_key_fails_at_once_naming_the_server_and_the_variable(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A 401 is not tried again nor taken for an outage; the error names base_url and the key's variable,
    never the key."""
    outcome = await analyze(server, tmp_path, Status(401, message=f"bad key {KEY}"), Reply(PASS))
    error = outcome.exit.error or ""
    assert outcome.feedback is None and len(server.requests) == 1 and outcome.exit.provider_down is None
    assert server.base_url in error and KEY_ENV in error and KEY not in error


async def test_a_missing_key_variable_is_named_and_nothing_is_sent(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the key's variable the step fails naming it, before any request."""
    monkeypatch.delenv(KEY_ENV)
    outcome = await analyze(server, tmp_path)
    assert outcome.feedback is None and server.requests == []
    assert f"environment variable {KEY_ENV}" in (outcome.exit.error or "")


async def test_a_server_refusing_json_schema_is_asked_in_json_object_mode(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A 400 that names the response format is a refusal: the call is asked again as json_object with the
    schema; a 400 that does not is the request's error, not asked again."""
    refusal = Status(400, message="response_format json_schema is not supported by this server")
    feedback = feedback_of(await analyze(server, tmp_path / "a", refusal, Reply(PASS, 10, 2)))
    first, second = server.requests
    assert (first.format_type, second.format_type) == ("json_schema", "json_object")
    assert second.body["response_format"]["schema"] == first.body["response_format"]["json_schema"]["schema"]
    assert '"verdict"' in second.text and feedback.verdict == "pass"
    outcome = await analyze(server, tmp_path / "b", Status(400, message="context too long"), Reply(PASS))
    assert len(server.requests) == 3 and outcome.feedback is None and outcome.exit.provider_down is None
    assert "context too long" in (outcome.exit.error or "")


async def test_malformed_json_gets_one_repair_and_usage_sums_both_calls(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """An answer that is not valid JSON gets one repair round quoting the error; both calls are paid."""
    feedback = feedback_of(
        await analyze(server, tmp_path, Reply('{"verdict": "fail",', 700, 30), Reply(FAIL, 800, 90))
    )
    second = server.requests[1]
    roles = [m["role"] for m in second.body["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert "Invalid JSON" in second.body["messages"][-1]["content"]
    assert feedback.usage == Usage(
        input_tokens=1500, output_tokens=120, cost_usd=cost(1500, 120), source="api"
    )
    assert (tmp_path / "analyze-lease" / "prompt-2.md").is_file()


async def test_an_extra_key_gets_one_repair_quoting_it(server: FakeOpenAI, tmp_path: Path) -> None:
    """Feedback with a key the schema does not have is repaired, not fatal: the repair names the key."""
    extra = json.dumps({**json.loads(PASS), "confidence": 0.9})
    feedback = feedback_of(await analyze(server, tmp_path, Reply(extra, 500, 40), Reply(PASS, 600, 30)))
    assert feedback.verdict == "pass" and len(server.requests) == 2
    assert "confidence" in server.requests[1].text
    assert feedback.usage.tokens == 500 + 40 + 600 + 30


async def test_an_answer_still_invalid_after_the_repair_is_handed_to_the_step(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Two answers that miss `verdict`: the outcome carries no feedback, says what is wrong with the last,
    and reports what both calls cost (so that the step counts it though it keeps no feedback)."""
    outcome = await analyze(
        server, tmp_path, Reply('{"done": true}', 300, 20), Reply('{"done": false}', 350, 25)
    )
    assert outcome.feedback is None and len(server.requests) == 2
    assert "not valid after one repair round: field 'verdict'" in (outcome.exit.error or "")
    assert outcome.exit.spent == Usage(
        input_tokens=650, output_tokens=45, cost_usd=cost(650, 45), source="api"
    )


async def test_the_applier_edits_the_worktree_and_reports_its_usage(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The applier sends the system's files and the improvements, and makes the edit it is answered."""
    outcome = await apply(server, tmp_path, Reply(EDITS, 400, 60))
    assert outcome.exit.error is None and outcome.output is not None
    output = json.loads(outcome.output)
    assert output["summary"] == "added the greeting rule"
    assert output["usage"] == {
        "input_tokens": 400,
        "output_tokens": 60,
        "cost_usd": cost(400, 60),
        "source": "api",
    }
    assert (tmp_path / "tree" / "rules.md").read_text() == RULES + "- rule: greet\n"
    [request] = server.requests
    assert (
        request.schema_name == "edits"
        and "Say hello first." in request.text
        and "- rule: base" in request.text
    )


async def test_old_text_not_found_gets_one_repair_and_usage_sums_both_calls(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """An edit whose old text is not in the file changes nothing, is quoted in one repair round, and
    both calls are paid."""
    wrong = json.dumps({"edits": [{**GREET_EDIT, "old": "- rule: nope\n"}], "summary": "x"})
    outcome = await apply(server, tmp_path, Reply(wrong, 300, 40), Reply(EDITS, 350, 45))
    assert outcome.output is not None, outcome.exit.error
    assert json.loads(outcome.output)["usage"] == {
        "input_tokens": 650,
        "output_tokens": 85,
        "cost_usd": cost(650, 85),
        "source": "api",
    }
    assert "edits[0] (rules.md): the old text '- rule: nope\\n' occurs 0 times" in server.requests[1].text
    assert (tmp_path / "tree" / "rules.md").read_text() == RULES + "- rule: greet\n"


@pytest.mark.parametrize("name", ["../escaped.md", "/tmp/escaped.md", ".git/config"])
async def test_the_applier_refuses_paths_outside_the_worktree(
    server: FakeOpenAI, tmp_path: Path, name: str
) -> None:
    """A file outside the worktree (`..`, absolute, `.git`) is refused, twice: nothing is written."""
    plan = json.dumps({"new_files": [{"file": name, "content": "x"}, {"file": "ok.md", "content": "y"}]})
    outcome = await apply(server, tmp_path, Reply(plan), Reply(plan))
    assert outcome.output is None and "could not be made" in (outcome.exit.error or "")
    assert sorted(p.name for p in (tmp_path / "tree").iterdir()) == ["rules.md"]
    assert not (tmp_path / "escaped.md").exists()


def test_a_runner_of_kind_llm_is_read_and_built_with_a_prober_always_up() -> None:
    """A tuning with kind llm in all three roles is read; its runner is an LlmRunner whose prober
    reports the (absent) sandbox up."""
    llm = {"kind": "llm", "model": MODEL}
    tuning = TuningConfig.model_validate(
        {"name": "t1", "system": "s", "cases": "c", "runner": llm, "analyzer": llm, "applier": llm}
    )
    host = AgentHost(grace_s=1.0)
    assert isinstance(build_runner(tuning.runner, host), LlmRunner)
    assert asyncio.run(build_prober(tuning.runner).probe()) is None
    assert isinstance(build_analyzer(tuning.analyzer, host), LlmAnalyzer)
    assert isinstance(build_applier(tuning.applier, host), LlmApplier)


MEMORY_NOTE = "Ada prefers a short greeting."
SKILL_TEXT = "# Greet\n\nSay hello first, by name.\n"


def run_request(tmp_path: Path, memory: bool = True) -> RunRequest:
    """A run of the_case() on a system with rules.md and skills/greet.md, with a memory note if `memory`."""
    system = tmp_path / "system"
    (system / "skills").mkdir(parents=True)
    (system / "rules.md").write_text(RULES)
    (system / "skills" / "greet.md").write_text(SKILL_TEXT)
    (tmp_path / "memory").mkdir()
    if memory:
        (tmp_path / "memory" / "notes.md").write_text(MEMORY_NOTE)
    return RunRequest(
        **step_fields(tmp_path, "run"),
        task=the_case().task(),
        run_index=1,
        version="v1",
        system_dir=system,
        memory_dir=tmp_path / "memory",
        workspace_dir=tmp_path / "workspace",
        expected_skills=["greet"],
    )


async def run(server: FakeOpenAI, tmp_path: Path, *script: Scripted) -> RunOutcome:
    server.play(*script)
    return await LlmRunner(config(server)).run(run_request(tmp_path))


async def test_the_runner_asks_with_the_task_and_the_instructions_but_not_the_rubric(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The runner's one request, in plain-text mode, holds the task's input, the system's files, the memory
    and the expected skills but not the rubric; its answer is the run's, and the skills it quoted count
    as loaded; prompt and answer are kept in the run's folder."""
    outcome = await run(server, tmp_path, Reply("Hello, Ada!", 500, 40))
    assert outcome.exit_code == 0 and outcome.void is None and outcome.output is not None
    assert outcome.output.answer == "Hello, Ada!" and outcome.output.turns == 1
    assert outcome.output.skills_loaded == ["greet"]
    [request] = server.requests
    assert "response_format" not in request.body and request.body["model"] == MODEL
    for quoted in ("Greet Ada.", "- rule: base", "Say hello first, by name.", MEMORY_NOTE, "greet"):
        assert quoted in request.text, quoted
    assert RUBRIC_TEXT not in request.text and "greets" not in request.text
    step_dir = tmp_path / "run-lease"
    prompt = (step_dir / "prompt-1.md").read_text()
    assert "- response_format: text" in prompt and "Greet Ada." in prompt
    assert json.loads((step_dir / "answer-1.json").read_text())["usage"]["prompt_tokens"] == 500


async def test_the_runners_usage_is_measured_from_the_api(server: FakeOpenAI, tmp_path: Path) -> None:
    """The run's usage is the answered call's tokens (not the failed attempt's), priced, with source api."""
    outcome = await run(server, tmp_path, Status(503), Reply("Hello, Ada!", 700, 55))
    assert outcome.output is not None and len(server.requests) == 2
    assert outcome.output.usage == Usage(
        input_tokens=700, output_tokens=55, cost_usd=cost(700, 55), source="api"
    )


async def test_a_provider_down_is_no_run(server: FakeOpenAI, tmp_path: Path) -> None:
    """After max_retries + 1 failing attempts there is no run (provider down: the step hands the case
    back, spending no try), with no output."""
    outcome = await run(server, tmp_path, Status(503), Status(503), Status(503), Reply("Hello, Ada!"))
    assert outcome.output is None and len(server.requests) == 3 and outcome.void is None
    down = outcome.provider_down or ""
    assert down.startswith("provider unavailable after 3 attempts:") and "503" in down
    assert "provider unavailable" in (tmp_path / "run-lease" / "run.log").read_text()


async def test_a_refused_or_missing_key_stops_the_run_naming_the_variable(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 is no run (the step holds the tuning), said at once naming the server and the key's
    variable, never the key; without the variable the run is void naming it, and nothing is sent."""
    refused = await run(server, tmp_path / "a", Status(401, message=f"bad key {KEY}"), Reply("Hi"))
    void = refused.key_refused or ""
    assert refused.output is None and len(server.requests) == 1
    assert "refused the API key (401)" in void and server.base_url in void
    assert KEY_ENV in void and KEY not in void
    monkeypatch.delenv(KEY_ENV)
    missing = await run(server, tmp_path / "b")
    assert missing.output is None and len(server.requests) == 1
    assert f"environment variable {KEY_ENV}" in (missing.void or "")


async def test_a_tunings_own_prompt_is_used_and_a_bad_one_refused(server: FakeOpenAI, tmp_path: Path) -> None:
    """prompts.analyze replaces the built-in template; an unknown placeholder, a relative path are refused."""
    own = tmp_path / "grade.md"
    own.write_text("Grade case $case_id against:\n$rubric\nAnswer with JSON: $schema\n")
    feedback_of(await analyze(server, tmp_path, Reply(PASS), prompts={"analyze": own}))
    assert server.requests[0].text.startswith(f"Grade case c1 against:\n- `greets`: {RUBRIC_TEXT}")
    own.write_text("Grade $nonsense\n")
    with pytest.raises(ConfigError, match=r"unknown placeholder \$nonsense"):
        LlmAnalyzer(config(server, prompts={"analyze": own}))
    with pytest.raises(ValueError, match="must be an absolute path"):
        config(server, prompts={"apply": "prompts/apply.md"})


def test_the_example_tuning_in_the_adapters_doc_is_valid() -> None:
    """The `kind: llm` example of docs/adapters.md reads as a TuningConfig with llm analyzer and applier."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "adapters.md").read_text()
    section = text[text.index("## The LLM meta agent") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml\n") + 8)]
    tuning = TuningConfig.model_validate(yaml.safe_load(example))
    assert isinstance(tuning.analyzer, LlmAdapter) and tuning.applier == tuning.analyzer
    assert tuning.analyzer.prices["gpt-4.1"].output_usd_per_1m == 8.0


RUNNER = """
import json, pathlib, sys
rules = pathlib.Path(sys.argv[1], "rules.md").read_text()
answer = "Hello, Ada!" if "- rule: greet" in rules else "Here is the weather."
pathlib.Path(sys.argv[2]).write_text(json.dumps({"answer": answer, "turns": 1}))
"""


def command_runner() -> dict[str, Any]:
    """A command runner that answers "Hello, Ada!" once the system holds the greeting rule."""
    argv = [sys.executable, "-c", RUNNER.replace("{", "{{").replace("}", "}}"), "{system}", "{output}"]
    return {"kind": "command", "argv": argv, "timeout_s": 20}


def cases(count: int) -> list[dict[str, Any]]:
    """`count` copies of the_case(), as case files: c1, c2, ..."""
    case = the_case().model_dump(mode="json", exclude={"demo"})
    return [{**case, "id": f"c{n}"} for n in range(1, count + 1)]


def meta_agent(body: dict[str, Any]) -> Scripted:
    """The fleet test's model: grades by the run's answer quoted in the prompt; answers the greeting edit."""
    if body["response_format"]["json_schema"]["name"] == "edits":
        return Reply(EDITS, 400, 60)
    prompt = body["messages"][0]["content"]
    return Reply(PASS if "Hello, Ada!" in prompt else FAIL, 1000, 100)


async def test_an_llm_meta_agent_takes_a_case_from_fail_through_apply_to_completed(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a real fleet the LLM analyzer fails the first run, the LLM applier's edit makes the next pass, the
    case completes, the key goes only into the Authorization header, and the case's cost is the calls'."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FakeOpenAI(responder=meta_agent) as server:
        llm = config(server).model_dump(mode="json")
        runner = command_runner()
        tuning = write_tuning(tmp_path / "t", cases(1), runner=runner, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(10, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed", rows["c1"].reason
    kinds = [r.schema_name for r in server.requests]
    assert kinds == ["feedback", "edits", "feedback", "feedback"]  # nomem 1 fails, apply, nomem 2, mem 1
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert RUBRIC_TEXT in server.requests[0].text and "Here is the weather." in server.requests[0].text
    schema = server.requests[0].body["response_format"]["json_schema"]["schema"]
    for variant in schema["anyOf"]:
        assert "verdict" in variant["properties"] and not {"run_seal", "seal"} & set(variant["properties"])
    assert rows["c1"].tokens == 3 * 1100 + 460
    assert rows["c1"].cost_usd == pytest.approx(3 * cost(1000, 100) + cost(400, 60))
    attempt = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1" / "nomem" / "1"
    recorded = read_model(attempt / "feedback.json", Feedback)
    assert recorded is not None and recorded.usage.cost_usd == cost(1000, 100)
    assert (attempt / "analysis.md").read_text().startswith("# Analysis of c1")
    assert KEY not in fleet.log_of(0)
    for path in fleet.settings.store.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            assert KEY.encode() not in path.read_bytes(), path


def llm_agent(body: dict[str, Any]) -> Scripted:
    """The fleet test's model as a runner too: a plain-text request is a run, which greets once the
    instructions in its prompt hold the greeting rule; the rest is meta_agent's."""
    if "response_format" in body:
        return meta_agent(body)
    prompt = body["messages"][0]["content"]
    return Reply("Hello, Ada!" if "- rule: greet" in prompt else "Here is the weather.", 300, 30)


async def test_an_llm_runner_takes_a_case_through_a_real_fleet_to_completed(
    fleet: Fleet, tmp_path: Path
) -> None:
    """In a real fleet with kind llm as runner, analyzer and applier the first run fails, the edit makes
    the next runs greet, the case completes; no run's prompt holds the rubric, and each run's usage is
    the API's."""
    with FakeOpenAI(responder=llm_agent) as server:
        llm = config(server).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=llm, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(10, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed", rows["c1"].reason
    kinds = [r.schema_name for r in server.requests]
    assert kinds == [None, "feedback", "edits", None, "feedback", None, "feedback"]
    runs = [r for r in server.requests if r.schema_name is None]
    assert all("Greet Ada." in r.text and RUBRIC_TEXT not in r.text for r in runs)
    assert "Here is the weather." in server.requests[1].text
    assert rows["c1"].tokens == 3 * 330 + 3 * 1100 + 460
    case_dir = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1"
    first = read_model(case_dir / "nomem" / "1" / "run.json", RunRecord)
    last = read_model(case_dir / "mem" / "1" / "run.json", RunRecord)
    assert first is not None and first.output.answer == "Here is the weather."
    assert last is not None and last.output.answer == "Hello, Ada!" and last.exit_code == 0
    assert last.output.usage == Usage(
        input_tokens=300, output_tokens=30, cost_usd=cost(300, 30), source="api"
    )


async def test_an_llm_runners_outage_and_refused_key_spend_no_try(fleet: Fleet, tmp_path: Path) -> None:
    """An llm runner whose provider stays down hands the case back (no run recorded); a refused key holds
    the tuning; after `resume` the case completes with exactly the honest tries."""
    mode = "down"

    def responder(body: dict[str, Any]) -> Scripted:
        if "response_format" not in body and mode == "down":
            return Status(503)
        if "response_format" not in body and mode == "refused":
            return Status(401, message="invalid api key")
        return llm_agent(body)

    with FakeOpenAI(responder=responder) as server:
        llm = config(server).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=llm, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": "0.3"})
        await wait_until(lambda: any(e["kind"] == "provider_down" for e in fleet.events()), 30, "an outage")
        mode = "refused"
        async with fleet.client() as client:
            began = time.monotonic()
            while (held := (await client.status()).tunings[0].held) is None:
                assert time.monotonic() - began < 30, "the tuning was never held"
                await asyncio.sleep(0.05)
            assert held.kind == "auth"
            mode = "up"
            assert await client.resume("t1")
        rows = await fleet.wait_finished(1, timeout_s=30)
    assert rows["c1"].state == "completed", rows["c1"].reason
    attempts = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1" / "nomem"
    assert sorted(p.name for p in attempts.iterdir()) == ["1", "2"]  # no void, no extra try


def permits_key(server: FakeOpenAI) -> str:
    return keys.llm_permits(keys.llm_provider(server.base_url, MODEL))


async def test_the_concurrency_limit_holds_across_three_worker_processes(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """With concurrency 2, three worker processes running six cases never have more than two requests in
    flight at the server (and do reach two), every case completes, and no permit is left behind."""
    with FakeOpenAI(responder=lambda body: Reply(PASS, 100, 10, delay_s=0.5)) as server:
        llm = config(server, concurrency=2).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(6), runner=command_runner(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        for _ in range(3):
            fleet.start_worker(4, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(6, timeout_s=90)
    assert {row.state for row in rows.values()} == {"completed"}, rows
    assert len(server.requests) == 12  # per case: nomem 1 passes, mem 1 passes
    assert server.max_in_flight == 2
    assert redis_server.zcard(permits_key(server)) == 0


async def test_a_killed_workers_permit_returns_within_its_lease(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A worker SIGKILLed while it holds the only permit (concurrency 1) on a slow answer loses the permit
    within its lease: another worker's call reaches the server while the dead one's is still unanswered."""
    answered = 0

    def responder(body: dict[str, Any]) -> Scripted:
        nonlocal answered
        answered += 1
        return Reply(PASS, delay_s=120 if answered == 1 else 0)

    with FakeOpenAI(responder=responder) as server:
        llm = config(server, concurrency=1).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=command_runner(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        first = fleet.start_worker(4, **{KEY_ENV: KEY})
        await wait_until(lambda: len(server.requests) == 1, 30, "the first worker's call")
        [holder] = redis_server.zmembers(permits_key(server))
        first.send_signal(signal.SIGKILL)
        first.wait()
        with redis_server.client() as redis:
            seconds, micros = cast(tuple[int, int], redis.time())
            expiry_ms = cast(float | None, redis.zscore(permits_key(server), holder))
        now_ms = seconds * 1000 + micros // 1000
        assert (
            expiry_ms is not None and expiry_ms - now_ms <= PERMIT_LEASE_S * 1000
        )  # lapses within its lease
        fleet.start_worker(4, **{KEY_ENV: KEY})
        await wait_until(lambda: len(server.requests) >= 2, 30, "the second worker's call")
        assert server.in_flight >= 1  # the dead worker's request is still unanswered: only its permit lapsed
        rows = await fleet.wait_finished(1, timeout_s=30)
    assert rows["c1"].state == "completed", rows["c1"].reason
    assert holder not in redis_server.zmembers(permits_key(server))


async def test_tokens_per_minute_delays_a_call_until_the_window_has_room(
    server: FakeOpenAI, tmp_path: Path, redis_server: RedisServer
) -> None:
    """The tokens of an answer (from its usage) fill the minute's window; with them at the limit the next
    call waits until they leave the window, and not much longer."""
    redis = Redis.from_url(redis_server.url)
    providers = Providers(redis)
    try:
        analyzer = LlmAnalyzer(config(server, tokens_per_minute=1000), providers)
        server.play(Reply(PASS, 900, 200), Reply(PASS, 10, 2))
        feedback_of(await analyzer.analyze(analyze_request(tmp_path)))
        window = keys.llm_tokens(keys.llm_provider(server.base_url, MODEL))
        [member] = await redis.zrange(window, 0, -1)
        assert member.endswith(b":1100")
        seconds, micros = await redis.time()
        leaves_in_ms = 1500  # the entry leaves the window 1.5 s from now (by Redis's clock)
        await redis.zadd(window, {member: seconds * 1000 + micros // 1000 - 60_000 + leaves_in_ms})
        began = time.monotonic()
        (tmp_path / "second").mkdir()
        feedback_of(await analyzer.analyze(analyze_request(tmp_path / "second")))
    finally:
        await providers.aclose()
        await redis.aclose()
    waited_s = server.requests[1].at - began
    assert leaves_in_ms / 1000 - 0.1 <= waited_s < leaves_in_ms / 1000 + 3


@pytest.mark.parametrize("step", ["feedback", "edits"], ids=["analyze", "apply"])
async def test_a_provider_down_hands_the_case_back_until_it_answers_again(
    fleet: Fleet, tmp_path: Path, step: str
) -> None:
    """While the provider answers the analyze (or apply) step only 503 the case is handed back to the
    queue, deferred by provider_retry_s, with a `provider_down` event and no try spent; once the provider
    answers again the case completes."""
    down = True
    answered: list[str] = []

    def responder(body: dict[str, Any]) -> Scripted:
        if down and body["response_format"]["json_schema"]["name"] == step:
            return Status(503)
        answered.append(body["response_format"]["json_schema"]["name"])
        return meta_agent(body)

    with FakeOpenAI(responder=responder) as server:
        llm = config(server).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=command_runner(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": "0.8"})
        await wait_until(
            lambda: sum(e["kind"] == "provider_down" for e in fleet.events()) >= 2,
            30,
            "two provider_down events",
        )
        assert fleet.results()["c1"].state == "unfinished"
        down = False
        rows = await fleet.wait_finished(1, timeout_s=30)
    assert rows["c1"].state == "completed", rows["c1"].reason
    events = fleet.events()
    first_down = next(e for e in events if e["kind"] == "provider_down")
    assert "503" in first_down["detail"] and first_down["data"]["retry_in_s"] == 0.8
    taken_again = next(
        e for e in events if e["kind"] == "case_started" and event_time_s(e) > event_time_s(first_down)
    )
    assert event_time_s(taken_again) - event_time_s(first_down) >= 0.7  # deferred, not at once
    assert len(server.requests) >= len(answered) + 2 * 3  # two outages of three attempts each
    assert answered == ["feedback", "edits", "feedback", "feedback"]  # nomem 1 fails, apply, nomem 2, mem 1
    attempts = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1" / "nomem"
    assert sorted(p.name for p in attempts.iterdir() if p.name.isdigit()) == ["1", "2"]


async def test_an_expired_permit_does_not_count_beside_a_live_one(
    server: FakeOpenAI, redis_server: RedisServer
) -> None:
    """With concurrency 2, a holder whose expiry has passed is dropped at the next grant, even while a live
    holder keeps the key alive; two live holders make the next call wait; the call's permit is given
    back after it."""
    redis = Redis.from_url(redis_server.url)
    try:
        limits = ProviderLimits(redis, config(server, concurrency=2))
        seconds, micros = await redis.time()
        now_ms = seconds * 1000 + micros // 1000
        permits = permits_key(server)
        await redis.zadd(permits, {"dead": now_ms - 1, "live": now_ms + 60_000})
        async with asyncio.timeout(5), limits.call():
            assert await redis.zcard(permits) == 2 and await redis.zscore(permits, "dead") is None
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5), limits.call():
                    pass
        await limits.aclose()  # the permit is given back in a task of its own: wait for it
        assert await redis.zrange(permits, 0, -1) == [b"live"]
    finally:
        await redis.aclose()


async def test_a_refused_key_holds_the_tuning_until_resume(fleet: Fleet, tmp_path: Path) -> None:
    """A 401 fails no case: the tuning is held (kind auth, shown in status), the case is handed back and
    its provider is asked nothing more until `resume`; then the case completes."""
    refusing = True

    def responder(body: dict[str, Any]) -> Scripted:
        return Status(401, message="invalid api key") if refusing else meta_agent(body)

    with FakeOpenAI(responder=responder) as server:
        llm = config(server).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=command_runner(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(4, **{KEY_ENV: KEY, "TUNEFLEET_PROVIDER_RETRY_S": "0.3"})
        async with fleet.client() as client:
            began = time.monotonic()
            while (held := (await client.status()).tunings[0].held) is None:
                assert time.monotonic() - began < 30, "the tuning was never held"
                await asyncio.sleep(0.05)
            assert held.kind == "auth" and server.base_url in held.reason and KEY not in held.reason
            await wait_until(
                lambda: sum(e["kind"] == "case_started" for e in fleet.events()) >= 2,
                15,
                "the case taken again while the tuning is held",
            )
            assert fleet.results()["c1"].state == "unfinished"
            refusing = False
            assert await client.resume("t1")
        rows = await fleet.wait_finished(1, timeout_s=30)
    assert rows["c1"].state == "completed", rows["c1"].reason
    kinds = [r.schema_name for r in server.requests]
    assert kinds == ["feedback"] * 2 + ["edits", "feedback", "feedback"]  # the refused call, then the case


async def test_a_case_budget_stops_llm_steps_before_they_start(fleet: Fleet, tmp_path: Path) -> None:
    """With a case budget below what the first LLM grade costs, the case ends `difficult: budget` before
    its apply starts, and its result holds the spend that the API measured."""
    with FakeOpenAI(responder=meta_agent) as server:
        llm = config(server).model_dump(mode="json")
        budget = {"case_max_tokens": 500}
        tuning = write_tuning(
            tmp_path / "t", cases(1), runner=command_runner(), analyzer=llm, applier=llm, budget=budget
        )
        await fleet.start_tuning(tuning)
        fleet.start_worker(4, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(1)
    row = rows["c1"]
    assert row.state == "difficult" and (row.reason or "").startswith("budget: spent 1100 tokens")
    assert [r.schema_name for r in server.requests] == ["feedback"]  # no apply was asked for
    assert row.tokens == 1100
