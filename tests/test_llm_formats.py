"""Structured output negotiated per provider and remembered, and one client per worker and provider, against
the tests' OpenAI-compatible server scripted as servers really answer (llama-cpp-python refuses
`json_schema` with a 500 of its validation error)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from service.core import keys
from service.core.models.tuning import LlmAdapter
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, write_tuning
from tests.support.redis_server import RedisServer
from tests.test_llm_adapters import analyze_request
from tests.test_llm_grading import GOOD
from workers.adapters.llm.analyzer import LlmAnalyzer
from workers.adapters.llm.formats import AnswerSchema, response_format
from workers.adapters.llm.goal import WorkAnswer
from workers.adapters.llm.pool import Providers

LLAMA_REFUSAL = (
    "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


def llama_like(body: dict[str, Any]) -> Scripted:
    """Refuses json_schema as llama-cpp-python does; answers everything else."""
    if body.get("response_format", {}).get("type") == "json_schema":
        return Status(500, message=LLAMA_REFUSAL)
    if "response_format" not in body:
        return Reply("Hello, Ada!", 50, 5)
    schema = body["response_format"].get("schema") or {}
    ids = schema.get("anyOf", [{}])[0].get("properties", {}).get("rubric", {}).get("required", ["greets"])
    rubric = ", ".join(f'"{item}": 1' for item in ids)
    return Reply(f'{{"verdict": "pass", "done": true, "rubric": {{{rubric}}}, "summary": "ok"}}', 80, 20)


def cases(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"c{n}", "input": "Greet Ada.", "rubric": [{"id": "greets", "text": "Greets Ada."}]}
        for n in range(1, count + 1)
    ]


def adapter(server: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": server.base_url,
        "model": "m",
        "api_key_env": None,
        "max_retries": 0,
        **extra,
    }


async def test_a_refused_json_schema_is_learned_once_per_worker_and_for_the_fleet(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Six cases graded at once by one worker send json_schema once (the others wait for that answer) and
    then json_object with the schema; the fleet keeps what worked in Redis, so a second worker never
    sends json_schema; every case completes."""
    with FakeOpenAI(responder=llama_like) as server:
        llm = adapter(server)
        tuning = write_tuning(tmp_path / "t", cases(6), runner=llm, analyzer=llm, applier=llm, mem_tries=1)
        await fleet.start_tuning(tuning)
        fleet.start_worker(6)
        rows = await fleet.wait_finished(6)
        provider = keys.llm_provider(server.base_url, "m")
        assert redis_server.get(keys.llm_format(provider)) == b"json_object_schema"
        first = len(server.requests)
        tuning2 = write_tuning(tmp_path / "t2", cases(2), name="t2", runner=llm, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning2)
        fleet.start_worker(2)
        rows2 = await fleet.wait_finished(2, tuning="t2")
    formats = [r.format_type for r in server.requests]
    assert formats[:first].count("json_schema") == 1
    assert "json_schema" not in formats[first:] and formats[first:].count("json_object") >= 2
    assert all(r.state == "completed" for r in [*rows.values(), *rows2.values()])


async def test_a_named_format_is_used_as_it_is(tmp_path: Path) -> None:
    """structured_output: json_object sends JSON mode only, never json_schema; a server that refuses it
    fails the step naming the setting."""
    with FakeOpenAI() as server:
        server.play(Reply(GOOD), Status(400, message="response_format json_object is not supported"))
        config = LlmAdapter(
            base_url=server.base_url, model="m", api_key_env=None, structured_output="json_object"
        )
        analyzer = LlmAnalyzer(config)
        first = await analyzer.analyze(analyze_request(tmp_path / "1"))
        second = await analyzer.analyze(analyze_request(tmp_path / "2"))
    assert first.exit.error is None
    assert [r.body["response_format"] for r in server.requests] == [{"type": "json_object"}] * 2
    assert "structured_output: json_object" in (second.exit.error or "")


async def test_a_server_refusing_every_response_format_gets_the_schema_in_the_prompt(tmp_path: Path) -> None:
    """json_schema, json_object with the schema and json_object refused in turn: the call goes out with no
    response format (the schema is in the prompt) and that is remembered by the worker's pool."""
    refusal = Status(422, message="unsupported response_format")
    async with Providers() as providers:
        with FakeOpenAI() as server:
            server.play(refusal, refusal, refusal, Reply(GOOD), Reply(GOOD))
            config = LlmAdapter(base_url=server.base_url, model="m", api_key_env=None)
            analyzer = LlmAnalyzer(config, providers)
            for n in (1, 2):
                assert (await analyzer.analyze(analyze_request(tmp_path / str(n)))).exit.error is None
        assert providers.get(config).formats.known == "prompt"
    sent = [r.body.get("response_format") for r in server.requests]
    assert [f and (f["type"], "schema" in f) for f in sent] == [
        ("json_schema", False),
        ("json_object", True),
        ("json_object", False),
        None,
        None,
    ]
    assert '"verdict"' in server.requests[3].text


async def four_analyses_at_once(providers: Providers, server: FakeOpenAI, folder: Path) -> int:
    """Four analyses started together through `providers` against `server`, each of which must succeed;
    the most calls the server had in flight at once."""
    analyzer = LlmAnalyzer(LlmAdapter(base_url=server.base_url, model="m", api_key_env=None), providers)
    outcomes = await asyncio.gather(*(analyzer.analyze(analyze_request(folder / str(n))) for n in range(4)))
    assert all(outcome.exit.error is None for outcome in outcomes)
    return server.max_in_flight


async def test_calls_that_waited_for_the_negotiation_then_go_side_by_side(tmp_path: Path) -> None:
    """Four analyses started at once on a provider whose format is not known yet: the first negotiates
    it alone, and the three that waited for it then call at the same time, not one after the other."""
    async with Providers() as providers:
        with FakeOpenAI(responder=lambda body: Reply(GOOD, delay_s=0.3)) as server:
            most_at_once = await four_analyses_at_once(providers, server, tmp_path)
    assert [r.format_type for r in server.requests] == ["json_schema"] * 4
    assert most_at_once == 3


async def test_a_worker_joining_a_fleet_that_knows_the_format_calls_side_by_side_at_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A new worker whose fleet learned the format (in Redis) sends it with its very first calls, four at
    once, without negotiating; a format the fleet learned but the server now refuses is forgotten and
    negotiated again from the next one down."""
    redis = Redis.from_url(redis_server.url)
    try:
        async with Providers(redis) as providers:
            with FakeOpenAI(responder=lambda body: Reply(GOOD, delay_s=0.3)) as server:
                provider = keys.llm_provider(server.base_url, "m")
                await redis.set(keys.llm_format(provider), "json_object")
                most_at_once = await four_analyses_at_once(providers, server, tmp_path)
        assert [r.format_type for r in server.requests] == ["json_object"] * 4
        assert most_at_once == 4

        async with Providers(redis) as providers:
            with FakeOpenAI(responder=llama_like) as server:
                config = LlmAdapter(base_url=server.base_url, model="m", api_key_env=None)
                provider = keys.llm_provider(server.base_url, "m")
                await redis.set(keys.llm_format(provider), "json_schema")  # stale: this server refuses it
                outcome = await LlmAnalyzer(config, providers).analyze(analyze_request(tmp_path / "stale"))
        assert outcome.exit.error is None
        assert [r.format_type for r in server.requests] == ["json_schema", "json_object"]
        assert await redis.get(keys.llm_format(provider)) == b"json_object_schema"
    finally:
        await redis.aclose()


async def test_one_worker_reuses_its_client_across_steps(fleet: Fleet, tmp_path: Path) -> None:
    """A worker's steps share one client per provider: eight cases' calls (runs and analyses, one at a
    time) arrive over a single connection, not one per step."""
    with FakeOpenAI(responder=llama_like) as server:
        llm = adapter(server)
        tuning = write_tuning(tmp_path / "t", cases(8), runner=llm, analyzer=llm, applier=llm, mem_tries=1)
        await fleet.start_tuning(tuning)
        fleet.start_worker(1)
        rows = await fleet.wait_finished(8)
    assert all(r.state == "completed" for r in rows.values())
    connections = {r.client for r in server.requests}
    assert len(server.requests) >= 8 * 4 and len(connections) == 1, (len(server.requests), connections)


async def test_a_changed_key_gets_a_new_client_and_both_are_closed_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the key variable changes, the next step gets a client with the new key; the old one (steps
    may still be calling through it) stays open until the pool closes, which closes both."""
    monkeypatch.setenv("ROTATED_KEY", "key-one")
    async with Providers() as providers:
        with FakeOpenAI() as server:
            server.play(Reply(GOOD), Reply(GOOD))
            config = LlmAdapter(base_url=server.base_url, model="m", api_key_env="ROTATED_KEY")
            analyzer = LlmAnalyzer(config, providers)
            assert (await analyzer.analyze(analyze_request(tmp_path / "1"))).exit.error is None
            first, _ = providers.get(config).client(config)
            monkeypatch.setenv("ROTATED_KEY", "key-two")
            assert (
                await LlmAnalyzer(config, providers).analyze(analyze_request(tmp_path / "2"))
            ).exit.error is None
            second, _ = providers.get(config).client(config)
            assert second is not first and not first.is_closed()
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer key-one", "Bearer key-two"]
    assert first.is_closed() and second.is_closed()


async def test_max_tokens_refused_is_sent_as_max_completion_tokens(tmp_path: Path) -> None:
    """max_output_tokens goes out as max_tokens (which llama-cpp-python, vLLM and Ollama read); a server
    that refuses it by name gets the call again with max_completion_tokens, and so do later calls."""
    refusal = Status(400, message="Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens'.")
    async with Providers() as providers:
        with FakeOpenAI() as server:
            server.play(refusal, Reply(GOOD), Reply(GOOD))
            config = LlmAdapter(base_url=server.base_url, model="m", api_key_env=None, max_output_tokens=64)
            analyzer = LlmAnalyzer(config, providers)
            for n in (1, 2):
                assert (await analyzer.analyze(analyze_request(tmp_path / str(n)))).exit.error is None
    limits = [{k: v for k, v in r.body.items() if k.startswith("max_")} for r in server.requests]
    assert limits == [{"max_tokens": 64}, {"max_completion_tokens": 64}, {"max_completion_tokens": 64}]


def test_the_schema_sent_leaves_out_size_bounds_and_keeps_the_rest() -> None:
    """The goal worker's answer schema goes out without its `maxLength` (summaries) and `maxItems` (tasks)
    at any depth; a property that is named `maxItems` stays, and so do `minLength` and the enums. The
    prompt's copy of the schema is not touched."""
    schema = WorkAnswer.model_json_schema()
    schema["properties"]["maxItems"] = {"type": "integer"}
    answer = AnswerSchema("work", schema)
    sent = response_format("json_object_schema", answer)
    assert sent is not None
    assert size_bounds(schema) and not size_bounds(sent["schema"])
    assert sent["schema"]["properties"]["maxItems"] == {"type": "integer"}
    task = sent["schema"]["$defs"]["TaskOutcome"]["properties"]
    assert task["task"]["minLength"] == 1 and task["status"]["enum"] == ["finished", "failed"]
    assert schema["properties"]["summary"]["maxLength"] == 20_000  # the caller's schema is as it was
    assert json.loads(answer.quoted) == schema  # and the prompt quotes it whole


def size_bounds(schema: Any) -> list[str]:
    """The `maxLength` and `maxItems` bounds (numbers) anywhere in a schema."""
    if isinstance(schema, list):
        return [bound for item in schema for bound in size_bounds(item)]
    if not isinstance(schema, dict):
        return []
    own = [
        key for key, value in schema.items() if key in ("maxLength", "maxItems") and isinstance(value, int)
    ]
    return own + [bound for value in schema.values() for bound in size_bounds(value)]
