"""Every token a step's calls spent, counted: measured where the server said, estimated where not.

`Meter` sums one step's calls. A completion's `usage` is taken as the server gave it (its cached
prompt tokens, `prompt_tokens_details.cached_tokens`, apart, priced at `cached_input_usd_per_1m`).
A completion without usage, and a call that timed out or was cut off after it was sent (providers
bill those too), are counted by the `Estimator`: the prompt (and the answer, if one came) is
tokenized by the server's own tokenize endpoint where it has one, else by a byte count
(`BYTES_PER_TOKEN`), and those tokens are marked estimated (usage source `estimated` when every
token of the step was).

The server's endpoint is found once per provider and worker: llama-cpp-python's
`/extras/tokenize/count`, llama.cpp's or vLLM's `/tokenize`; none answering (a 404, an error),
the byte count serves from then on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import openai
import structlog
from openai.types.chat import ChatCompletion

from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter

log = structlog.get_logger()

BYTES_PER_TOKEN = 3.0
"""The fallback estimate: UTF-8 bytes per token, on the high side for prose (about 4 in English)
so that an estimate errs towards counting too much rather than too little."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat template adds around each message (role markers), and once for the answer's start."""
TOKENIZE_TIMEOUT_S = 5.0

Endpoint = Literal["llama-cpp-python", "llama.cpp", "vllm", "none"]
PROBES: tuple[tuple[Endpoint, str], ...] = (
    ("llama-cpp-python", "/extras/tokenize/count"),
    ("llama.cpp", "/tokenize"),
    ("vllm", "/tokenize"),
)


def server_root(base_url: str) -> str:
    """The server's root: the base URL without its trailing `/v1`."""
    root = base_url.rstrip("/")
    return root.removesuffix("/v1")


def prompt_text(params: dict[str, Any]) -> str:
    """What a call's messages say, joined (what the server tokenizes, less its template)."""
    return "\n".join(str(m.get("content", "")) for m in params.get("messages", []))


def _body(kind: Endpoint, text: str, model: str) -> dict[str, Any]:
    if kind == "llama-cpp-python":
        return {"input": text, "model": model}
    if kind == "llama.cpp":
        return {"content": text}
    return {"model": model, "prompt": text}


def _count(answer: Any) -> int | None:
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("count"), int):
        return int(answer["count"])
    tokens = answer.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


class Estimator:
    """Counts text as one provider's model would, as well as it can (see the module's docstring)."""

    def __init__(self, base_url: str, model: str) -> None:
        self._root = server_root(base_url)
        self._model = model
        self.endpoint: Endpoint | None = None
        """The endpoint found (None: not looked for yet; 'none': the byte count)."""

    async def count(self, sdk: openai.AsyncOpenAI, text: str) -> int:
        """The tokens of `text`: the server's count, else the byte estimate."""
        if not text:
            return 0
        kinds = PROBES if self.endpoint is None else [p for p in PROBES if p[0] == self.endpoint]
        for kind, path in kinds:
            try:
                counted = await self._ask(sdk, kind, path, text)
            except (openai.APIConnectionError, openai.InternalServerError):
                break  # the server is not answering now: the byte count, this once
            if counted is not None:
                if self.endpoint is None:
                    log.info("llm_tokenizer_found", endpoint=kind, root=self._root)
                self.endpoint = kind
                return counted
        else:
            self.endpoint = "none"
        return bytes_estimate(text)

    async def _ask(self, sdk: openai.AsyncOpenAI, kind: Endpoint, path: str, text: str) -> int | None:
        """The server's count at `path`; None when it has no such endpoint (or answers something else)."""
        try:  # `object`: the answer's JSON as it came (its text, if the server sent no JSON)
            answer = await sdk.post(
                self._root + path,
                cast_to=object,
                body=_body(kind, text, self._model),
                options={"timeout": TOKENIZE_TIMEOUT_S, "max_retries": 0},
            )
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise
            return None
        except ValueError:  # JSON by its content type, and not readable as JSON
            return None
        return _count(answer)


def bytes_estimate(text: str) -> int:
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)


@dataclass
class Meter:
    """Tokens summed over a step's calls, priced per million from the adapter's table."""

    config: LlmAdapter
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated_tokens: int = 0

    def measured(self, completion: ChatCompletion) -> bool:
        """Add a completion's usage; False when it has none (the caller estimates it)."""
        usage = completion.usage
        if usage is None:
            return False
        self.input_tokens += usage.prompt_tokens
        self.output_tokens += usage.completion_tokens
        details = usage.prompt_tokens_details
        if details is not None and details.cached_tokens:
            self.cached_input_tokens += min(details.cached_tokens, usage.prompt_tokens)
        return True

    def estimated(self, input_tokens: int, output_tokens: int = 0) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.estimated_tokens += input_tokens + output_tokens

    def usage(self) -> Usage:
        price = self.config.prices.get(self.config.model)
        cost_usd = 0.0
        if price is not None:
            cached_rate = price.cached_input_usd_per_1m
            if cached_rate is None:
                cached_rate = price.input_usd_per_1m
            cost_usd = (
                (self.input_tokens - self.cached_input_tokens) * price.input_usd_per_1m
                + self.cached_input_tokens * cached_rate
                + self.output_tokens * price.output_usd_per_1m
            ) / 1_000_000
        tokens = self.input_tokens + self.output_tokens
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=round(cost_usd, 6),
            source="estimated" if tokens and self.estimated_tokens == tokens else "api",
            estimated_tokens=self.estimated_tokens,
            cached_input_tokens=self.cached_input_tokens,
        )
