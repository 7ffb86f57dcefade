"""`kind: llm` analyzer and applier against a real OpenAI-compatible server (tests/support/fake_openai.py):
in-process for the protocol (retries, fallbacks, repairs, usage), and in a real fleet end to end."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.errors import ConfigError
from service.files import read_model
from service.models.case import Case, DemoKnobs, RubricItem
from service.models.records import Feedback, Improvement, RunOutput, RunRecord, Usage
from service.models.tuning import LlmAdapter, ModelPrice, TuningConfig
from tests.support.fake_openai import Drop, FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, write_tuning
from workers.adapters.base import AnalyzeOutcome, AnalyzeRequest, ApplyOutcome, ApplyRequest
from workers.adapters.factory import build_analyzer, build_applier
from workers.adapters.llm import LlmAnalyzer, LlmApplier
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
        "demo": DemoKnobs(),
    }


def analyze_request(tmp_path: Path) -> AnalyzeRequest:
    (tmp_path / "system").mkdir()
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
        input_tokens=900, output_tokens=120, cost_usd=cost(900, 120)
    )
    [request] = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == MODEL and request.format_type == "json_schema"
    spec = request.body["response_format"]["json_schema"]
    assert spec["name"] == "feedback" and spec["strict"] is False
    assert set(spec["schema"]["properties"]) == {
        "verdict",
        "done",
        "rubric",
        "improvements",
        "summary",
        "infra",
    }
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
    """A 5xx answer or a connection dropped mid-answer is tried again, and the second answer counts."""
    feedback = feedback_of(await analyze(server, tmp_path, fault, Reply(PASS, 50, 5)))
    assert feedback.verdict == "pass" and len(server.requests) == 2
    assert feedback.usage == Usage(input_tokens=50, output_tokens=5, cost_usd=cost(50, 5))


async def test_a_provider_down_through_every_attempt_is_the_steps_error(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """After max_retries + 1 failing attempts the analyzer reports the provider unavailable, no feedback."""
    outcome = await analyze(server, tmp_path, Status(503), Status(503), Status(503), Reply(PASS))
    assert outcome.feedback is None and len(server.requests) == 3
    assert (outcome.exit.error or "").startswith("provider unavailable after 3 attempts:")
    assert "503" in (outcome.exit.error or "")


async def test_a_refused_key_fails_at_once_naming_the_server_and_the_variable(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """A 401 is not tried again; the error names base_url and the key's variable, never the key."""
    outcome = await analyze(server, tmp_path, Status(401, message=f"bad key {KEY}"), Reply(PASS))
    error = outcome.exit.error or ""
    assert outcome.feedback is None and len(server.requests) == 1
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
    """A 400 to response_format json_schema is asked again as json_object, the schema in the prompt."""
    feedback = feedback_of(await analyze(server, tmp_path, Status(400), Reply(PASS, 10, 2)))
    first, second = server.requests
    assert (first.format_type, second.format_type) == ("json_schema", "json_object")
    assert '"verdict"' in second.text and feedback.verdict == "pass"


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
    assert feedback.usage == Usage(input_tokens=1500, output_tokens=120, cost_usd=cost(1500, 120))
    assert (tmp_path / "analyze-lease" / "prompt-2.md").is_file()


async def test_an_answer_still_invalid_after_the_repair_is_handed_to_the_step(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Two answers that miss `verdict`: the outcome carries the last one and says it did not validate."""
    outcome = await analyze(server, tmp_path, Reply('{"done": true}'), Reply('{"done": false}'))
    assert outcome.feedback == b'{"done": false}' and len(server.requests) == 2
    assert "did not validate" in (outcome.exit.error or "")


async def test_the_applier_edits_the_worktree_and_reports_its_usage(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The applier sends the system's files and the improvements, and makes the edit it is answered."""
    outcome = await apply(server, tmp_path, Reply(EDITS, 400, 60))
    assert outcome.exit.error is None and outcome.output is not None
    output = json.loads(outcome.output)
    assert output["summary"] == "added the greeting rule"
    assert output["usage"] == {"input_tokens": 400, "output_tokens": 60, "cost_usd": cost(400, 60)}
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


def test_a_runner_of_kind_llm_is_refused_when_the_tuning_is_read() -> None:
    """kind llm is for the analyzer and the applier; as a runner the tuning is refused, naming it."""
    llm = {"kind": "llm", "model": MODEL}
    with pytest.raises(ValueError, match="runner: kind llm is for the analyzer and the applier only"):
        TuningConfig.model_validate({"name": "t1", "system": "s", "cases": "c", "runner": llm})
    tuning = TuningConfig.model_validate(
        {"name": "t1", "system": "s", "cases": "c", "analyzer": llm, "applier": llm}
    )
    host = AgentHost(grace_s=1.0)
    assert isinstance(build_analyzer(tuning.analyzer, host), LlmAnalyzer)
    assert isinstance(build_applier(tuning.applier, host), LlmApplier)


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
        runner = {
            "kind": "command",
            "argv": [
                sys.executable,
                "-c",
                RUNNER.replace("{", "{{").replace("}", "}}"),
                "{system}",
                "{output}",
            ],
            "timeout_s": 20,
        }
        case = the_case().model_dump(mode="json", exclude={"demo", "expect"})
        tuning = write_tuning(tmp_path / "t", [case], runner=runner, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(10, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed", rows["c1"].reason
    kinds = [r.schema_name for r in server.requests]
    assert kinds == ["feedback", "edits", "feedback", "feedback"]  # nomem 1 fails, apply, nomem 2, mem 1
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert RUBRIC_TEXT in server.requests[0].text and "Here is the weather." in server.requests[0].text
    schema = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert "verdict" in schema["properties"] and not {"run_seal", "seal"} & set(schema["properties"])
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
