"""One LLM step's calls: what each asked and answered, kept in the step's folder, and what all cost.

Every call's rendered prompt is kept as `prompt-<n>.md` and its raw answer (the whole completion as
the server sent it, or the error) as `answer-<n>.json` in the step's folder, with a line per call in
the step's log: for people, not records, so written plainly (a step run again writes them again).
Usage is counted over every attempt (workers.adapters.llm.tokens), repairs, answers that did not
validate and attempts that timed out included, and priced from the adapter's `prices`.

A session that asks for JSON negotiates the response format with the provider
(workers.adapters.llm.formats) unless the adapter names one.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from service.core.io.files import append_line
from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import StepRequest
from workers.adapters.llm.client import LlmClient
from workers.adapters.llm.errors import (
    FormatRefused,
    LlmStepError,
    ParamRefused,
    ProviderRejected,
)
from workers.adapters.llm.formats import LADDER, AnswerSchema, Format, after, reaches, response_format
from workers.adapters.llm.pool import Providers, borrowed
from workers.adapters.llm.provider import Provider
from workers.adapters.llm.tokens import Meter
from workers.meter import follow_spend

T = TypeVar("T")

Message = dict[str, str]


@dataclass
class Session:
    """The calls of one step to one provider; asks for JSON following `answer`, or, without one, for a
    plain answer (no response format)."""

    config: LlmAdapter
    provider: Provider
    step_dir: Path
    log_file: Path
    answer: AnswerSchema | None = None
    calls: int = 0
    meter: Meter = field(init=False)
    client: LlmClient = field(init=False)

    def __post_init__(self) -> None:
        self.meter = Meter(self.config)
        follow_spend(self.meter.usage)  # read by the fleet if the step is cut short (workers.meter)
        self.step_dir.mkdir(parents=True, exist_ok=True)
        self.client = LlmClient(self.config, self.provider)

    def say(self, line: str) -> None:
        append_line(self.log_file, f"llm: {line}")

    def _params(self, messages: list[Message], fmt: Format | None) -> dict[str, Any]:
        config = self.config
        params: dict[str, Any] = {"model": config.model, "messages": messages}
        if fmt is not None and self.answer is not None:
            wanted = response_format(fmt, self.answer)
            if wanted is not None:
                params["response_format"] = wanted
        if config.temperature is not None:
            params["temperature"] = config.temperature
        if config.max_output_tokens is not None:
            params[self.provider.max_tokens_param] = config.max_output_tokens
        return params

    async def ask(self, messages: list[Message]) -> str:
        """The text of the model's answer to `messages`, in the response format the provider takes."""
        if self.answer is None:
            return await self._call(messages, None)
        setting = self.config.structured_output
        if setting != "auto":
            try:
                return await self._call(messages, setting)
            except FormatRefused as exc:
                raise ProviderRejected(
                    f"{exc} (structured_output: {setting}; `auto` would try the others)", exc.status_code
                ) from exc
        memory = self.provider.formats
        known = memory.known
        if known is not None:
            try:
                return await self._call(messages, known)
            except FormatRefused as exc:
                self.say(f"{known} refused after all ({exc}): negotiating again")
                memory.forget(known)
                return await self._negotiate(messages, after(known))
        return await self._negotiate(messages, LADDER[0])

    async def _negotiate(self, messages: list[Message], floor: Format) -> str:
        """Find the format from `floor` down, one call of this worker at a time (`_down_the_ladder`); a
        format the fleet learned at or below `floor` is taken without a call."""
        memory = self.provider.formats
        async with memory.negotiating:
            if not reaches(memory.known, floor):
                recalled = await memory.recall()
                if recalled is None or not reaches(recalled, floor):
                    return await self._down_the_ladder(messages, floor)
                memory.adopt(recalled)
        # Known now (learned while this one waited, or recalled from the fleet): asked outside the
        # negotiation, so that the calls that waited for it go on side by side, not one after the other.
        return await self.ask(messages)

    async def _down_the_ladder(self, messages: list[Message], fmt: Format) -> str:
        """Call in `fmt`, then in each format below it that the server refuses; the first answered is
        learned."""
        while True:
            try:
                answer = await self._call(messages, fmt)
            except FormatRefused as exc:
                self.say(f"the server refused {fmt} ({exc.status_code}): trying {after(fmt)}")
                fmt = after(fmt)
                continue
            await self.provider.formats.learn(fmt)
            return answer

    async def _call(self, messages: list[Message], fmt: Format | None) -> str:
        self.calls += 1
        n = self.calls
        mode = fmt or "text"
        params = self._params(messages, fmt)
        (self.step_dir / f"prompt-{n}.md").write_bytes(_transcript(params).encode())
        before = self.meter.usage()
        try:
            completion = await self.client.complete(params, self.meter)
        except ParamRefused as exc:
            self.say(f"call {n}: {exc}: asking again with max_completion_tokens")
            self.provider.max_tokens_param = "max_completion_tokens"
            return await self._call(messages, fmt)
        except LlmStepError as exc:
            (self.step_dir / f"answer-{n}.json").write_bytes(
                json.dumps({"error": str(exc)}, indent=2).encode()
            )
            self.say(f"call {n} ({mode}): {exc}{_spent(before, self.meter.usage())}")
            raise
        (self.step_dir / f"answer-{n}.json").write_bytes(completion.model_dump_json(indent=2).encode())
        self.say(f"call {n} ({mode}) to {self.config.model}:{_spent(before, self.meter.usage())}")
        if not completion.choices:
            return ""
        return completion.choices[0].message.content or ""


def _spent(before: Usage, now: Usage) -> str:
    """What one call added to the meter, for the step's log."""
    tokens_in = now.input_tokens - before.input_tokens
    tokens_out = now.output_tokens - before.output_tokens
    if not tokens_in and not tokens_out:
        return " nothing counted"
    estimated = now.estimated_tokens - before.estimated_tokens
    cached = now.cached_input_tokens - before.cached_input_tokens
    notes = [f"{estimated} estimated"] if estimated else []
    notes += [f"{cached} cached"] if cached else []
    return f" {tokens_in} in, {tokens_out} out" + (f" ({', '.join(notes)})" if notes else "")


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


ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def json_answer(text: str) -> str:
    """A model's JSON answer, read as leniently as is safe: out of its code fence, and with the raw
    control characters inside its strings escaped (models often write a newline in a string as it is,
    which strict JSON refuses: `control character (\\u0000-\\u001F) found while parsing a string`). Only
    characters inside strings change, so the answer is then validated as strictly as before; control
    characters outside strings are whitespace or an error either way."""
    out: list[str] = []
    inside = escaped = False
    for char in strip_fences(text):
        if inside and not escaped and char < " ":
            out.append(ESCAPES.get(char, f"\\u{ord(char):04x}"))
            continue
        out.append(char)
        if escaped:
            escaped = False
        elif inside and char == "\\":
            escaped = True
        elif char == '"':
            inside = not inside
    return "".join(out)


async def in_session(
    config: LlmAdapter,
    providers: Providers | None,
    request: StepRequest,
    answer: AnswerSchema,
    body: Callable[[Session], Awaitable[T]],
    failed: Callable[[LlmStepError, Usage | None], T],
) -> T:
    """`body` with a session on the provider's client; a step error is `failed` with what the calls
    before it cost (None when no session was opened)."""
    session: Session | None = None
    try:
        async with borrowed(providers) as pool:
            session = Session(config, pool.get(config), request.step_dir, request.log_file, answer)
            return await body(session)
    except LlmStepError as exc:
        return failed(exc, session.meter.usage() if session is not None else None)
