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

import pytest

from tests.support.fake_openai import FakeOpenAI, Forward, Scripted
from tests.support.fleet import Fleet, write_tuning
from tests.support.llama import MODEL, LlamaServer

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
