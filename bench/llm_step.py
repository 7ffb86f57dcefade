"""The llm benchmark's row of the LLM step alone: the worker's analyzer (`LlmAnalyzer.analyze`, with the
worker's pool of providers and a fleet-wide `concurrency`, so its permits go through Redis) against the
`openai` SDK's `chat.completions.create` with the very body the analyzer sent, one call at a time, in
one process, against the same local server (tests/support/fake_openai.py in a thread, answering at
once).

What is compared is the CPU time of the calling thread (`time.thread_time`): the server's thread and
the other sessions on the machine stay out of it, and with one call at a time nothing else runs on
the event loop between a call's start and its end. The two take turns in blocks of BLOCK calls, so
that a change in the machine's load falls on both alike. What the step does beyond the SDK's call:
the prompt (the run, its workspace and the system quoted), the permit (two Redis scripts), the
step's files (`prompt-<n>.md`, `answer-<n>.json`, the log line), the answer's validation, the
report, and the step's usage.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from redis.asyncio import Redis

from bench.common import Env, Figure, median
from service.core.models.case import Case, RubricItem
from service.core.models.records import RunOutput, RunRecord
from service.core.models.tuning import LlmAdapter
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted
from workers.adapters.base import AnalyzeRequest
from workers.adapters.llm.analyzer import LlmAnalyzer
from workers.adapters.llm.pool import Providers

BLOCKS = 8
BLOCK = 25
WARMUP = 20
MODEL = "bench-model"
PASS = '{"verdict": "pass", "done": true, "rubric": {"greets": 1.0}, "summary": "It greets Ada."}'
RULES = "# Rules\n\n- rule: base\n- rule: greet the user by name\n"


def answer(body: dict[str, Any]) -> Scripted:
    return Reply(PASS, 900, 40)


def request(root: Path, n: int) -> AnalyzeRequest:
    """An analyze request as the analyze step makes it: its own step folder, the run's workspace and
    the version's system."""
    where = root / f"a{n}"
    (where / "workspace").mkdir(parents=True)
    (where / "workspace" / "answer.txt").write_text("Hello Ada!\n")
    step_dir = where / "analyze-lease"
    run = RunRecord(
        version="v1",
        work="run-lease",
        started_at=datetime.now(UTC),
        duration_ms=5,
        exit_code=0,
        output=RunOutput(answer="Hello Ada!"),
    )
    return AnalyzeRequest(
        tuning="bench",
        case_id="c1",
        phase="nomem",
        attempt=1,
        attempt_dir=where,
        step_dir=step_dir,
        log_file=step_dir / "analyze.log",
        demo={},
        case=Case(id="c1", input="Greet Ada.", rubric=[RubricItem(id="greets", text="It greets Ada.")]),
        run=run,
        system_dir=root / "system",
        memory_dir=where / "memory",
        workspace_dir=where / "workspace",
    )


async def measure(env: Env, server: FakeOpenAI) -> tuple[list[float], list[float]]:
    """(CPU seconds per step call, per SDK call), one pair per block."""
    root = env.root / "step"
    (root / "system").mkdir(parents=True)
    (root / "system" / "rules.md").write_text(RULES)
    config = LlmAdapter.model_validate(
        {"base_url": server.base_url, "model": MODEL, "api_key_env": None, "max_retries": 0, "concurrency": 4}
    )
    redis = Redis.from_url(env.settings.redis_url)
    sdk = openai.AsyncOpenAI(api_key="no-key", base_url=server.base_url, max_retries=0, timeout=30)
    steps: list[float] = []
    calls: list[float] = []
    try:
        async with Providers(redis) as providers:
            analyzer = LlmAnalyzer(config, providers)
            n = 0
            for _ in range(WARMUP):
                n += 1
                await analyzer.analyze(request(root, n))
            body = server.requests[-1].body
            for _ in range(WARMUP):
                await sdk.chat.completions.create(**body)
            for _ in range(BLOCKS):
                requests = [request(root, n + i + 1) for i in range(BLOCK)]
                n += BLOCK
                began = time.thread_time()
                for one in requests:
                    outcome = await analyzer.analyze(one)
                    if outcome.feedback is None:
                        raise RuntimeError(f"the step failed: {outcome.exit.error}")
                steps.append((time.thread_time() - began) / BLOCK)
                began = time.thread_time()
                for _ in range(BLOCK):
                    await sdk.chat.completions.create(**body)
                calls.append((time.thread_time() - began) / BLOCK)
    finally:
        await sdk.close()
        await redis.aclose()
    return steps, calls


def figures(env: Env) -> list[Figure]:
    with FakeOpenAI(responder=answer) as server:
        steps, calls = asyncio.run(measure(env, server))
    ratios = [s / c for s, c in zip(steps, calls, strict=True)]
    step_ms = 1000 * median(steps)
    sdk_ms = 1000 * median(calls)
    return [
        Figure(
            "llm",
            "LLM step CPU per call, one call at a time (the analyzer alone)",
            step_ms,
            "ms",
            sdk_ms,
            "`chat.completions.create` with the same body, the same process",
            target="<= 2x the baseline",
            met=median(ratios) <= 2,
            note=(
                f"the calling thread's CPU (time.thread_time) over {BLOCKS} blocks of {BLOCK} calls each, "
                f"taking turns; median of the blocks; ratio per block "
                f"{', '.join(f'{r:.2f}' for r in ratios)} (median {median(ratios):.2f}): the prompt, the "
                "permit in Redis, the step's files, the validation and the report beside the SDK's call"
            ),
        )
    ]
