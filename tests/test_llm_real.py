"""`kind: llm` against a real model: SmolLM2-135M-Instruct served by llama-cpp-python
(tests/support/llama.py), behind the tests' recording server (tests/support/fake_openai.py relays every
call to it and records what the real server answered). Real tokenization, real usage, real
grammar-constrained output.

Few and short: one tuning of three cases with the model in every role, small answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.core.models.case import Case
from service.kinds.goals.state import Review
from tests.support.fake_openai import FakeOpenAI, Forward, Scripted
from tests.support.fleet import Fleet, write_tuning
from tests.support.llama import MODEL, LlamaServer
from workers.adapters.llm.edits import EditPlan
from workers.adapters.llm.formats import AnswerSchema, Format, response_format
from workers.adapters.llm.goal import WorkAnswer
from workers.adapters.llm.grading import feedback_schema

CASES = [
    {
        "id": "greet",
        "input": "A customer named Ada says hello. Greet her.",
        "rubric": [{"id": "by-name", "text": "The answer greets Ada by name."}],
    },
    {
        "id": "hours",
        "input": "When does the shop open on Saturday? It opens at 9 am.",
        "rubric": [{"id": "time", "text": "The answer says 9 am."}],
    },
    {
        "id": "refund",
        "input": "Can a damaged book be returned? Damaged books are refunded within 30 days.",
        "rubric": [
            {"id": "refund", "text": "The answer says it is refunded."},
            {"id": "limit", "text": "The answer names the 30-day limit."},
        ],
    },
]
FINAL = {"completed", "difficult", "failed"}
PROMPTS = Path(__file__).resolve().parent.parent / "examples" / "llm-demo" / "prompts"
"""make demo-llm's short prompts: the built-in ones take a small model on a busy CPU a minute to read."""


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with LlamaServer(tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server


def relay(body: dict[str, Any]) -> Scripted:
    return Forward()


def model_adapter(base_url: str) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": base_url,
        "model": MODEL,
        "api_key_env": None,
        "temperature": 0.2,
        "max_output_tokens": 96,
        "timeout_s": 300,
        "max_retries": 1,
        "concurrency": 2,
        "prompts": {"analyze": str(PROMPTS / "analyze.md"), "apply": str(PROMPTS / "apply.md")},
    }


@pytest.mark.timeout(900)  # the wait below: generation on two CPU cores shared with the other tests
async def test_a_tuning_with_the_real_model_in_every_role(
    fleet: Fleet, tmp_path: Path, llama: LlamaServer
) -> None:
    """Three cases whose runner, analyzer and applier are the real model all end; the server's refusal of
    json_schema (its 500) is met once by the worker, which then asks json_object with the schema (the
    server's grammar); and the tokens the fleet recorded are exactly the usage the server answered."""
    with FakeOpenAI(responder=relay, upstream=llama.root) as server:
        llm = model_adapter(server.base_url)
        tuning = write_tuning(
            tmp_path / "t", CASES, runner=llm, analyzer=llm, applier=llm, tries=2, mem_tries=1
        )
        await fleet.start_tuning(tuning)
        fleet.start_worker(3)
        rows = await fleet.wait_finished(len(CASES), timeout_s=900)
        async with fleet.client() as client:
            status = await client.status()
    assert {row.state for row in rows.values()} <= FINAL, {c: (r.state, r.reason) for c, r in rows.items()}
    formats = [r.format_type for r in server.requests]
    assert formats.count("json_schema") == 1, formats
    refused = next(r for r in server.requests if r.format_type == "json_schema")
    assert refused.answer["status"] == 500
    structured = [r for r in server.requests if r.format_type == "json_object"]
    assert structured and all("schema" in r.body["response_format"] for r in structured)
    assert formats.count("None") >= len(CASES)  # the runner's plain-text calls
    answered = [r.answer["usage"] for r in server.requests if r.answer.get("status") == 200]
    billed = sum(u["prompt_tokens"] + u["completion_tokens"] for u in answered)
    [tuning_status] = status.tunings
    assert tuning_status.tokens == billed and tuning_status.estimated_tokens == 0
    assert sum(row.tokens for row in rows.values()) == billed


def fleet_schemas() -> dict[str, dict[str, Any]]:
    """Every schema the fleet sends as a response format: a case's feedback, the applier's edit plan, and
    the goal worker's and reviewer's answers (the goal worker's bounds a 5,000-character summary and 200
    tasks)."""
    case = Case.model_validate({**CASES[2], "rev": 1})
    return {
        "feedback": feedback_schema(case),
        "edits": EditPlan.model_json_schema(),
        "work": WorkAnswer.model_json_schema(),
        "review": Review.model_json_schema(),
    }


@pytest.mark.parametrize("fmt", ["json_schema", "json_object_schema"])
def test_the_server_takes_every_schema_the_fleet_sends_and_lives(llama: LlamaServer, fmt: Format) -> None:
    """Each of the fleet's response formats, sent to llama-cpp-python as the fleet sends it, is answered
    (json_object_schema: 200, the answer constrained by the schema's grammar; json_schema: the 500 the
    fleet takes for a refusal) and the server is still up afterwards. The schemas' size bounds, sent as
    they are, made its grammar fail, and the server then crashed with SIGSEGV at the next token."""
    statuses = {}
    for name, schema in fleet_schemas().items():
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Answer with JSON."}],
            "max_tokens": 24,
            "temperature": 0,
            "response_format": response_format(fmt, AnswerSchema(name, schema)),
        }
        answer = httpx.post(f"{llama.base_url}/chat/completions", json=body, timeout=300)
        statuses[name] = answer.status_code
        assert llama.proc is not None and llama.proc.poll() is None, f"the server died on the {name} schema"
    assert statuses == dict.fromkeys(statuses, 200 if fmt == "json_object_schema" else 500), statuses
