"""Every LLM token counted and spending bounded, against the tests' OpenAI-compatible server scripted to
misbehave the way real ones do: answers without usage, a call that times out for one case only, 429s
without Retry-After, a whole provider that stops answering."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, cast

import openai
import pytest

from service.core import keys
from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter, ModelPrice
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, demo_adapter, wait_until, write_tuning
from tests.support.raw_http import read_request
from tests.support.redis_server import RedisServer
from tests.test_llm_adapters import analyze_request, cost, feedback_of
from workers.adapters.llm.analyzer import LlmAnalyzer
from workers.adapters.llm.pool import Providers
from workers.adapters.llm.tokens import PROBES, Estimator, bytes_estimate

MODEL = "count-model"
SLOW = "slow"
TIMEOUT_S = 1.0


def words(text: str) -> int:
    """The fake server's tokenizer: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def verdict(body: dict[str, Any]) -> str:
    """A passing grade of every rubric id the case's schema asks for."""
    variant = body["response_format"]["json_schema"]["schema"]["anyOf"][0]
    ids = variant["properties"]["rubric"]["required"]
    scores = ", ".join(f'"{item}": 1' for item in ids)
    return f'{{"verdict": "pass", "done": true, "rubric": {{{scores}}}, "summary": "It passes."}}'


def adapter(server: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": server.base_url,
        "model": MODEL,
        "api_key_env": None,
        "timeout_s": TIMEOUT_S,
        "max_retries": 2,
        "timeouts_max": 2,
        "retry_wait_min_s": 0.05,
        "retry_wait_max_s": 0.2,
        "concurrency": 4,
        **extra,
    }


class Misbehaving:
    """Answers the case `slow`'s analyses only after TIMEOUT_S (its calls time out), every other call
    after a short delay; leaves out the usage of every second answer; answers the first two calls 429
    without Retry-After."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> Scripted:
        self.calls += 1
        if self.calls <= 2:
            return Status(429)
        text = "\n".join(str(m["content"]) for m in body["messages"])
        usage = self.calls % 2 == 0
        if "response_format" not in body:  # the runner
            return Reply("Hello, Ada!", words(text) + 10, 3, delay_s=0.2, usage=usage)
        if f"# The case `{SLOW}`" in text:
            return Reply(verdict(body), words(text), 30, delay_s=TIMEOUT_S * 3)
        answer = verdict(body)
        return Reply(answer, words(text) + 10, words(answer), delay_s=0.2, usage=usage)


def case(case_id: str) -> dict[str, Any]:
    return {
        "id": case_id,
        "input": f"Greet Ada ({case_id}).",
        "rubric": [{"id": "greets", "text": "The answer greets Ada by name."}],
    }


async def test_a_misbehaving_provider_ends_every_case_and_counts_what_it_billed(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Against answers without usage, a case whose analyses time out while the others are answered, and
    429s without Retry-After: every case ends (the slow one failed, naming the timeouts, within its
    analysis rounds); the tokens recorded are at least 95 % of what the server billed and those not
    from its usage are marked estimated; the 429s halved the provider's fleet-wide permits."""
    responder = Misbehaving()
    names = [SLOW, "a", "b", "c"]
    with FakeOpenAI(responder=responder, tokenizer=words) as server:
        llm = adapter(server)
        tuning = write_tuning(
            tmp_path / "t", [case(n) for n in names], runner=llm, analyzer=llm, applier=llm, mem_tries=1
        )
        await fleet.start_tuning(tuning)
        fleet.start_worker(len(names))
        await wait_until(lambda: redis_server.exists(keys.llm_limits()), 30, "the 429s cut the permits")
        with redis_server.client() as redis:
            limits = cast(dict[bytes, bytes], redis.hgetall(keys.llm_limits()))
        rows = await fleet.wait_finished(len(names), timeout_s=90)
        await fleet.wait_counted(len(names))
        async with fleet.client() as client:
            status = await client.status()
        billed = server.billed_tokens
    states = {n: rows[n].state for n in names}
    assert states == {SLOW: "failed", "a": "completed", "b": "completed", "c": "completed"}
    reason = rows[SLOW].reason or ""
    assert re.search(r"timed out [12] times .* while .* answered other calls or a probe", reason), reason
    slow_calls = [r for r in server.requests if f"# The case `{SLOW}`" in r.text]
    assert len(slow_calls) in (2, 3)  # one analysis: at timeouts_max strikes, or its attempts spent
    [counted] = status.tunings
    assert counted.tokens >= 0.95 * billed, (counted.tokens, billed)
    measured = sum(  # the answers the fleet got (the slow case's came after it had given up)
        r.answer["usage"]["prompt_tokens"] + r.answer["usage"]["completion_tokens"]
        for r in server.requests
        if r.answer.get("usage") and r not in slow_calls
    )
    assert counted.estimated_tokens == counted.tokens - measured and counted.estimated_tokens > 0
    [(_, raw)] = limits.items()
    cut = json.loads(raw)
    assert cut["max"] == 4 and cut["limit"] in (1, 2) and cut["cuts"] >= 1


async def test_a_provider_that_times_out_for_every_case_hands_them_back(fleet: Fleet, tmp_path: Path) -> None:
    """When every call times out (the provider is down, not one case), the cases are handed back with a
    `provider_down` event and no try spent, and they complete once it answers again. The runner is the
    demo's, so that every call to the provider is one that times out while it is down (an LLM runner's
    answers, in flight beside the analyses, would be the provider answering others)."""
    down = True

    def responder(body: dict[str, Any]) -> Scripted:
        if down:  # the analyses and the probes that ask whether the provider is up
            return Reply("late", 10, 10, delay_s=TIMEOUT_S * 3)
        if "response_format" not in body:
            return Reply("Hello, Ada!", 10, 3)
        return Reply(verdict(body), 10, 10)

    with FakeOpenAI(responder=responder) as server:
        llm = adapter(server, max_retries=1)
        tuning = write_tuning(
            tmp_path / "t", [case("a"), case("b")], runner=demo_adapter(), analyzer=llm, applier=llm
        )
        await fleet.start_tuning(tuning)
        fleet.start_worker(4, TUNEFLEET_PROVIDER_RETRY_S="0.5")
        await wait_until(
            lambda: sum(e["kind"] == "provider_down" for e in fleet.events()) >= 2, 60, "provider_down events"
        )
        down = False
        rows = await fleet.wait_finished(2, timeout_s=60)
    assert {n: r.state for n, r in rows.items()} == {"a": "completed", "b": "completed"}
    attempts = fleet.settings.store / "tunings" / "t1" / "cases" / "a" / "r1" / "nomem"
    assert sorted(p.name for p in attempts.iterdir() if p.name.isdigit()) == ["1"]


async def test_cached_prompt_tokens_are_priced_at_their_own_rate(tmp_path: Path) -> None:
    """`prompt_tokens_details.cached_tokens` are read and priced at cached_input_usd_per_1m."""
    price = ModelPrice(input_usd_per_1m=2.0, output_usd_per_1m=8.0, cached_input_usd_per_1m=0.5)
    with FakeOpenAI() as server:
        server.play(Reply(verdict_for("greets"), 1000, 100, cached_tokens=600))
        config = LlmAdapter(base_url=server.base_url, model=MODEL, api_key_env=None, prices={MODEL: price})
        feedback = feedback_of(await LlmAnalyzer(config).analyze(analyze_request(tmp_path)))
    expected = round((400 * 2.0 + 600 * 0.5 + 100 * 8.0) / 1_000_000, 6)
    assert feedback.usage == Usage(
        input_tokens=1000, output_tokens=100, cost_usd=expected, source="api", cached_input_tokens=600
    )
    assert expected < cost(1000, 100)


def verdict_for(item: str) -> str:
    return f'{{"verdict": "pass", "done": true, "rubric": {{"{item}": 1}}, "summary": "ok"}}'


async def test_an_answer_without_usage_is_estimated_by_the_servers_tokenizer(tmp_path: Path) -> None:
    """A completion without usage is counted by the server's own tokenize endpoint, found once, and the
    step's usage is marked `estimated`."""
    async with Providers() as providers:
        with FakeOpenAI(tokenizer=words) as server:
            server.play(Reply(verdict_for("greets"), usage=False), Reply(verdict_for("greets"), usage=False))
            config = LlmAdapter(base_url=server.base_url, model=MODEL, api_key_env=None)
            analyzer = LlmAnalyzer(config, providers)
            first = feedback_of(await analyzer.analyze(analyze_request(tmp_path / "1")))
            second = feedback_of(await analyzer.analyze(analyze_request(tmp_path / "2")))
            billed = server.billed_tokens
        assert providers.get(config).estimator.endpoint == "llama.cpp"
    assert first.usage.source == "estimated" and first.usage.estimated_tokens == first.usage.tokens
    assert first.usage.tokens + second.usage.tokens >= 0.95 * billed


@pytest.mark.parametrize(
    "content_type, body",
    [("text/html", b"<html>not found</html>"), ("application/json", b"{not json")],
    ids=["a page", "broken json"],
)
async def test_a_tokenize_path_that_answers_no_count_leaves_the_byte_estimate(
    content_type: str, body: bytes
) -> None:
    """A server whose tokenize paths answer 200 with something other than a count (a web page, JSON that
    does not parse) has no tokenizer: every probe is read as none, the text is counted by its bytes, and
    the estimator stops asking."""
    asked: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append((await read_request(reader)).split(b" ")[1])
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: "
            + content_type.encode()
            + b"\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    text = "how many tokens are in this sentence"
    async with server, openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1") as sdk:
        estimator = Estimator(f"http://127.0.0.1:{port}/v1", MODEL)
        assert await estimator.count(sdk, text) == bytes_estimate(text)
        probes = len(asked)
        assert await estimator.count(sdk, text) == bytes_estimate(text)
    assert estimator.endpoint == "none" and probes == len(PROBES) and len(asked) == probes, asked
