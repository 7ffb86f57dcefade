"""One step's connection to an OpenAI-compatible Chat Completions server.

`LlmClient` is an async context manager that owns an `openai.AsyncOpenAI` (and so its HTTP
connections) for the length of one step. The SDK's own retries are off: tenacity tries a call
again on 429, 408, 409, 5xx and connection errors, waiting what the server's `Retry-After`
(or `retry-after-ms`) asks, else an exponential backoff with jitter, every wait capped at
`retry_wait_max_s`; after `max_retries` more attempts it gives up (ProviderUnavailable). A refused
key (401, 403) fails at once, naming the server and the variable, never the key.

Each attempt first waits for the provider's fleet-wide limits (`ProviderLimits`: a permit under
`concurrency`, room under `tokens_per_minute`) and holds its permit only while its request runs; the
waits between attempts hold none.
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, NoReturn

import openai
import structlog
from openai.types.chat import ChatCompletion
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from service.core.models.tuning import LlmAdapter
from workers.adapters.llm.errors import (
    LlmStepError,
    MissingApiKey,
    ProviderAuthFailed,
    ProviderRejected,
    ProviderUnavailable,
)
from workers.adapters.llm.limits import ProviderLimits

log = structlog.get_logger()

TRANSIENT_STATUS = frozenset({408, 409, 429})
"""Status codes tried again besides 5xx (as the SDK's own policy does)."""
AUTH_STATUS = frozenset({401, 403})
NO_KEY = "no-key"
"""What is sent as the key to a server configured with `api_key_env: null`."""
DETAIL_CHARS = 300


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # timeouts and dropped connections too
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in TRANSIENT_STATUS or exc.status_code >= 500
    return False


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a server asks for: `retry-after-ms`, or `Retry-After` in seconds or as an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _RetryAfterWait:
    """Waits what the server's Retry-After asks, else a jittered exponential backoff; both capped."""

    def __init__(self, min_s: float, max_s: float) -> None:
        self._min_s = min_s
        self._max_s = max_s

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, openai.APIStatusError):
            asked = retry_after_s(exc.response.headers)
            if asked is not None:
                return min(asked, self._max_s)
        backoff_s: float = self._min_s * 2.0 ** (state.attempt_number - 1)
        return min(backoff_s + random.uniform(0, self._min_s), self._max_s)


def describe(exc: openai.APIError, base_url: str, secret: str = "") -> str:
    """One line about a failed call: the status and the server's message, or why it was not reached;
    `secret` (the key, should a server echo it) is masked."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if exc.body is not None else exc.message
        text = " ".join(str(body).split())[:DETAIL_CHARS]
        line = f"{base_url} answered {exc.status_code}: {text}"
    else:
        reason = exc.__cause__ or exc.__context__
        cause = f" ({reason})" if reason is not None else ""
        line = f"cannot reach {base_url}: {exc.message}{cause}"[: DETAIL_CHARS + 100]
    return line.replace(secret, "***") if len(secret) >= 4 else line


class LlmClient:
    """`async with LlmClient(config, limits) as client: await client.complete(params)`; `limits` None:
    no fleet-wide limits (a client used outside a fleet)."""

    def __init__(self, config: LlmAdapter, limits: ProviderLimits | None = None) -> None:
        self._config = config
        self._limits = limits
        self._sdk: openai.AsyncOpenAI | None = None
        self._secret = ""

    def _key(self) -> str:
        name = self._config.api_key_env
        if name is None:
            return NO_KEY
        key = os.environ.get(name)
        if not key:
            raise MissingApiKey(
                f"the environment variable {name} (api_key_env) is not set on this worker: "
                f"it must hold the API key for {self._config.base_url}"
            )
        return key

    async def __aenter__(self) -> LlmClient:
        self._secret = self._key()
        self._sdk = openai.AsyncOpenAI(
            api_key=self._secret,
            base_url=self._config.base_url,
            timeout=self._config.timeout_s,
            max_retries=0,
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sdk is not None:
            await self._sdk.close()
            self._sdk = None

    @property
    def attempts(self) -> int:
        return self._config.max_retries + 1

    async def complete(self, params: dict[str, Any]) -> ChatCompletion:
        """One chat completion, tried again on transient failures; LlmStepError when none came."""
        if self._sdk is None:
            raise RuntimeError("LlmClient used outside `async with`")
        sdk, config = self._sdk, self._config
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=_RetryAfterWait(config.retry_wait_min_s, config.retry_wait_max_s),
            retry=retry_if_exception(_transient),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(sdk, params)
        except openai.APIStatusError as exc:
            self._raise_for(exc)
        except openai.APIConnectionError as exc:
            raise ProviderUnavailable(
                f"provider unavailable after {self.attempts} attempts: "
                f"{describe(exc, config.base_url, self._secret)}"
            ) from exc
        except openai.APIError as exc:  # an answer the SDK could not read as a completion
            raise LlmStepError(f"unreadable answer: {describe(exc, config.base_url, self._secret)}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(self, sdk: openai.AsyncOpenAI, params: dict[str, Any]) -> ChatCompletion:
        """One HTTP call, inside the provider's limits; its tokens are counted in the window after."""
        if self._limits is None:
            completion: ChatCompletion = await sdk.chat.completions.create(**params)
            return completion
        async with self._limits.call():
            completion = await sdk.chat.completions.create(**params)
        if completion.usage is not None:
            usage = completion.usage
            await self._limits.spend(usage.prompt_tokens + usage.completion_tokens)
        return completion

    def _raise_for(self, exc: openai.APIStatusError) -> NoReturn:
        config = self._config
        detail = describe(exc, config.base_url, self._secret)
        if exc.status_code in AUTH_STATUS:
            where = (
                f"the key in the environment variable {config.api_key_env}"
                if config.api_key_env
                else "whether the server needs a key (api_key_env is null)"
            )
            raise ProviderAuthFailed(
                f"{config.base_url} refused the API key ({exc.status_code}): check {where} "
                f"and its access to model {config.model}"
            ) from exc
        if _transient(exc):
            raise ProviderUnavailable(
                f"provider unavailable after {self.attempts} attempts: {detail}"
            ) from exc
        raise ProviderRejected(f"the request was refused: {detail}", exc.status_code) from exc

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        base_url = self._config.base_url
        detail = describe(exc, base_url, self._secret) if isinstance(exc, openai.APIError) else repr(exc)
        wait_s = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "llm_call_retried", attempt=state.attempt_number, of=self.attempts, wait_s=wait_s, error=detail
        )
