"""One LLM step's calls: what each asked and answered, kept in the step's folder, and what all cost.

Every call's rendered prompt is kept as `prompt-<n>.md` and its raw answer (the whole completion as
the server sent it, or the error) as `answer-<n>.json` in the step's folder, with a line per call in
the step's log. Usage is summed over every completion the server sent back, repairs and answers that
did not validate included, and priced from the adapter's `prices`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from openai.types.chat import ChatCompletion

from service.core.files import append_line, write_atomic
from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import StepExit, StepRequest
from workers.adapters.llm.client import LlmClient
from workers.adapters.llm.errors import (
    LlmStepError,
    ProviderAuthFailed,
    ProviderRejected,
    ProviderUnavailable,
)
from workers.adapters.llm.limits import ProviderLimits

T = TypeVar("T")

Message = dict[str, str]
Mode = Literal["json_schema", "json_object", "text"]
"""`text`: a plain answer, no `response_format` at all (the runner's)."""


@dataclass
class Meter:
    """Tokens summed over a step's calls, priced per million from the adapter's table."""

    config: LlmAdapter
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, completion: ChatCompletion) -> None:
        if completion.usage is not None:
            self.input_tokens += completion.usage.prompt_tokens
            self.output_tokens += completion.usage.completion_tokens

    def usage(self) -> Usage:
        price = self.config.prices.get(self.config.model)
        cost_usd = 0.0
        if price is not None:
            cost_usd = (
                self.input_tokens * price.input_usd_per_1m + self.output_tokens * price.output_usd_per_1m
            ) / 1_000_000
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=round(cost_usd, 6),
            source="api",
        )


def step_exit(
    started: float, error: str | None, down: LlmStepError | None = None, spent: Usage | None = None
) -> StepExit:
    """How an LLM step ended: `down` says why it failed (the provider's outage is `infra`, a refused key
    `key_refused`), `spent` what its calls cost whatever came of them."""
    duration_ms = max(0, int((time.monotonic() - started) * 1000))
    return StepExit(
        exit_code=0 if error is None else 1,
        duration_ms=duration_ms,
        error=error,
        infra=str(down) if isinstance(down, ProviderUnavailable) else None,
        key_refused=str(down) if isinstance(down, ProviderAuthFailed) else None,
        spent=spent,
    )


@dataclass
class Session:
    """The calls of one step, through one client; asks for JSON following `schema`, or in mode `text`
    for a plain answer (no schema)."""

    config: LlmAdapter
    client: LlmClient
    step_dir: Path
    log_file: Path
    schema_name: str = ""
    schema: dict[str, Any] = field(default_factory=dict)
    mode: Mode = "json_schema"
    calls: int = 0
    meter: Meter = field(init=False)

    def __post_init__(self) -> None:
        self.meter = Meter(self.config)
        self.step_dir.mkdir(parents=True, exist_ok=True)

    def say(self, line: str) -> None:
        append_line(self.log_file, f"llm: {line}")

    def _params(self, messages: list[Message]) -> dict[str, Any]:
        config = self.config
        params: dict[str, Any] = {"model": config.model, "messages": messages}
        if self.mode == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": self.schema_name, "schema": self.schema, "strict": False},
            }
        elif self.mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        if config.temperature is not None:
            params["temperature"] = config.temperature
        if config.max_output_tokens is not None:
            params["max_completion_tokens"] = config.max_output_tokens
        return params

    async def ask(self, messages: list[Message]) -> str:
        """The text of the model's answer to `messages`; a server that refuses structured output
        (400 to json_schema) is asked again in JSON mode, with the schema in the prompt only."""
        try:
            return await self._call(messages)
        except ProviderRejected as exc:
            if self.mode != "json_schema" or exc.status_code != 400:
                raise
            self.mode = "json_object"
            self.say("the server refused json_schema (400): asking again in json_object mode")
            return await self._call(messages)

    async def _call(self, messages: list[Message]) -> str:
        self.calls += 1
        n = self.calls
        params = self._params(messages)
        write_atomic(self.step_dir / f"prompt-{n}.md", _transcript(params).encode(), durable=False)
        try:
            completion = await self.client.complete(params)
        except LlmStepError as exc:
            answer = json.dumps({"error": str(exc)}, indent=2).encode()
            write_atomic(self.step_dir / f"answer-{n}.json", answer, durable=False)
            self.say(f"call {n} ({self.mode}): {exc}")
            raise
        self.meter.add(completion)
        write_atomic(
            self.step_dir / f"answer-{n}.json", completion.model_dump_json(indent=2).encode(), durable=False
        )
        usage = completion.usage
        tokens = f"{usage.prompt_tokens} in, {usage.completion_tokens} out" if usage else "no usage reported"
        self.say(f"call {n} ({self.mode}) to {self.config.model}: {tokens}")
        if not completion.choices:
            return ""
        return completion.choices[0].message.content or ""


def _transcript(params: dict[str, Any]) -> str:
    """A call as Markdown: its settings, then each message under its role."""
    settings = {key: value for key, value in params.items() if key not in ("messages", "response_format")}
    settings["response_format"] = params.get("response_format", {"type": "text"})["type"]
    head = "\n".join(f"- {key}: {value}" for key, value in settings.items())
    body = "\n\n".join(f"## {m['role']}\n\n{m['content']}" for m in params["messages"])
    return f"# Call\n\n{head}\n\n{body}\n"


def strip_fences(text: str) -> str:
    """The JSON inside a Markdown code fence, as models in JSON mode sometimes answer."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```"):
        first_line_end = stripped.find("\n")
        return stripped[first_line_end + 1 : -3].strip() if first_line_end != -1 else stripped
    return stripped


async def in_session(
    config: LlmAdapter,
    limits: ProviderLimits | None,
    request: StepRequest,
    schema_name: str,
    schema: dict[str, Any],
    body: Callable[[Session], Awaitable[T]],
    failed: Callable[[LlmStepError, Usage | None], T],
) -> T:
    """`body` with a session of its own client; a step error is `failed` with what the calls before it
    cost (None when no session was opened)."""
    session: Session | None = None
    try:
        async with LlmClient(config, limits) as client:
            session = Session(config, client, request.step_dir, request.log_file, schema_name, schema)
            return await body(session)
    except LlmStepError as exc:
        return failed(exc, session.meter.usage() if session is not None else None)
