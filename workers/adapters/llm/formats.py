"""Structured output, negotiated per provider: which `response_format` a server takes.

`structured_output` in the adapter picks one, or `auto` (the default) tries them in LADDER order:

    json_schema          {"type": "json_schema", "json_schema": {name, schema}}  (OpenAI, vLLM, Ollama)
    json_object_schema   {"type": "json_object", "schema": ...}    (llama-cpp-python: a grammar from it)
    json_object          {"type": "json_object"}                   (JSON mode; the schema is in the prompt)
    prompt               no response_format: the schema in the prompt only

A server refuses a format with a 4xx, or a 5xx (llama-cpp-python answers `json_schema` with a 500 of
its validation error), whose body names the response format (`refuses_format`); any other error is
not a refusal. What worked is remembered per provider (base_url and model): for the worker's life in
its `FormatMemory`, and for the fleet in Redis (`tf:llm-format:<provider>`, a day), so a refusal costs
one call per worker at most: while no format is known, one call at a time negotiates and the others
wait for its answer. A worker that joins a fleet which knows the format reads it once and takes it
without a negotiation: its first calls go side by side (a stale one is refused, forgotten and
negotiated again).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import openai
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from workers.adapters.llm.prompts import schema_text

log = structlog.get_logger()

Format = Literal["json_schema", "json_object_schema", "json_object", "prompt"]
LADDER: tuple[Format, ...] = get_args(Format)
MEMORY_TTL_S = 86_400
"""How long the fleet remembers a provider's format (a server may be upgraded meanwhile)."""
REFUSAL_RE = re.compile(
    r"response[_ ]format|json[_ ]schema|json[_ ]object|structured output|guided[_ ]json|grammar", re.I
)
NOT_REFUSALS = frozenset({401, 403, 408, 409, 429})


SIZE_BOUNDS = frozenset({"maxLength", "maxItems", "maxProperties", "maxContains"})
"""Bounds the schema sent to a server leaves out (the prompt's copy keeps them, and the fleet checks them
when it validates the answer): a grammar-based server unrolls each into that many rules. A `maxLength`
of 5,000 or a `maxItems` of 200 makes llama.cpp's grammar "exceed sane defaults"; llama-cpp-python
0.3 then samples with no grammar and crashes (SIGSEGV in libllama), taking every later call with it."""


def sent_schema(schema: Any) -> Any:
    """`schema` without its size bounds (SIZE_BOUNDS), at every depth. A bound is a number: a property
    that happens to be named like one has a schema (an object) for its value, and stays."""
    if isinstance(schema, list):
        return [sent_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: sent_schema(value)
        for key, value in schema.items()
        if not (key in SIZE_BOUNDS and isinstance(value, int))
    }


@dataclass(frozen=True)
class AnswerSchema:
    """The JSON schema a role's answers follow, made once per adapter (the analyzer's once per rubric):
    its name for the server, its text as prompts quote it, and the copy sent in a response format
    (`sent_schema`). A step's every call reads it; nobody changes it after."""

    name: str
    schema: dict[str, Any]
    quoted: str = field(init=False)
    sent: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "quoted", schema_text(self.schema))
        object.__setattr__(self, "sent", sent_schema(self.schema))


def response_format(fmt: Format, answer: AnswerSchema) -> dict[str, Any] | None:
    """The `response_format` of a call in `fmt` for answers following `answer` (None: send none)."""
    if fmt == "json_schema":
        named = {"name": answer.name, "schema": answer.sent, "strict": False}
        return {"type": "json_schema", "json_schema": named}
    if fmt == "json_object_schema":
        return {"type": "json_object", "schema": answer.sent}
    if fmt == "json_object":
        return {"type": "json_object"}
    return None


def refuses_format(exc: openai.APIStatusError) -> bool:
    """Whether an error answer refuses the request's response format (rather than failing it)."""
    if exc.status_code in NOT_REFUSALS or exc.status_code < 400:
        return False
    body = exc.body if exc.body is not None else exc.message
    return REFUSAL_RE.search(str(body)) is not None


def reaches(fmt: Format | None, floor: Format) -> bool:
    """Whether `fmt` is a format at `floor` or below it on the ladder (None: no format known)."""
    return fmt is not None and LADDER.index(fmt) >= LADDER.index(floor)


def after(fmt: Format) -> Format:
    """The next format down the ladder (`prompt` is the last, and refuses nothing)."""
    return LADDER[min(LADDER.index(fmt) + 1, len(LADDER) - 1)]


class FormatMemory:
    """The format one provider takes, as far as this worker knows (see the module's docstring)."""

    def __init__(self, provider: str, redis: Redis | None) -> None:
        self._provider = provider
        self._redis = redis
        self.known: Format | None = None
        self.negotiating = asyncio.Lock()

    async def recall(self) -> Format | None:
        """The format the fleet learned, if any (read, not yet taken: `adopt`)."""
        if self._redis is None:
            return None
        try:
            value = await self._redis.get(keys.llm_format(self._provider))
        except RedisError as exc:
            log.warning("llm_format_not_read", provider=self._provider, error=str(exc))
            return None
        text = value.decode() if isinstance(value, bytes) else value
        return text if text in LADDER else None

    def adopt(self, fmt: Format) -> None:
        """Take `fmt`, which the fleet learned, as this worker's (nothing written: the fleet has it)."""
        if self.known != fmt:
            self.known = fmt
            log.info("llm_format_recalled", provider=self._provider, format=fmt)

    async def learn(self, fmt: Format) -> None:
        """`fmt` worked: remember it here and for the fleet."""
        if self.known == fmt:
            return
        self.known = fmt
        log.info("llm_format_learned", provider=self._provider, format=fmt)
        if self._redis is None:
            return
        try:
            await self._redis.set(keys.llm_format(self._provider), fmt, ex=MEMORY_TTL_S)
        except RedisError as exc:  # this worker still knows it
            log.warning("llm_format_not_kept", provider=self._provider, error=str(exc))

    def forget(self, fmt: Format) -> None:
        """`fmt` was refused after all (the server changed): negotiate again from the next one down."""
        if self.known == fmt:
            self.known = None
