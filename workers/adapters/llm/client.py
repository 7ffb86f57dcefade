"""One step's calls to an OpenAI-compatible Chat Completions server, through its provider's client.

`LlmClient` makes one call with the worker's client of the provider (workers.adapters.llm.provider:
reused by every step). The SDK's own retries are off: tenacity tries a call again on 429, 408, 409,
5xx, timeouts and connection errors, waiting what the server's `Retry-After` (or `retry-after-ms`)
asks, else an exponential backoff with jitter, every wait capped at `retry_wait_max_s`; after
`max_retries` more attempts it gives up (ProviderUnavailable). A refused key (401, 403) fails at
once, naming the server and the variable, never the key; a refused response format
(FormatRefused) at once too, for the negotiation to try the next.

Each attempt first waits for the provider's fleet-wide limits (`ProviderLimits`: a permit under
`concurrency`, room under `tokens_per_minute`) and holds its permit only while its request runs; the
waits between attempts hold none. A 429 halves the fleet's permits (adaptive concurrency).

Every attempt is counted (workers.adapters.llm.tokens): its usage, else an estimate; one that timed
out or was cut off after it was sent, its prompt, estimated. An attempt that times out while the
provider answered other calls meanwhile, or answered the probe it is then asked
(workers.adapters.llm.probe), is a strike against this call; at `timeouts_max` strikes, or when its
attempts run out with one, the step fails (CallTimedOut) instead of waiting for an outage that is not
one.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import aiohttp
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
    CallTimedOut,
    FormatRefused,
    LlmStepError,
    ParamRefused,
    ProviderAuthFailed,
    ProviderRejected,
    ProviderUnavailable,
)
from workers.adapters.llm.formats import refuses_format
from workers.adapters.llm.probe import probe
from workers.adapters.llm.provider import Provider
from workers.adapters.llm.tokens import MESSAGE_OVERHEAD_TOKENS, Meter, prompt_text

log = structlog.get_logger()

TRANSIENT_STATUS = frozenset({408, 409, 429})
"""Status codes tried again besides 5xx (as the SDK's own policy does)."""
AUTH_STATUS = frozenset({401, 403})
DETAIL_CHARS = 300
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
"""The transport's errors of an attempt that never reached the server: refused, or no connection in time."""


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


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what caused it, outermost first."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__


def _sent(exc: openai.APIConnectionError) -> bool:
    """Whether a failed attempt reached the server (a timeout or a cut while it answered), so that the
    provider may bill it; a refused or timed-out connection sent nothing. Read from the transport's own
    error (aiohttp's, workers.adapters.llm.provider), not the SDK's mapping of it, which files a
    connection the server dropped before its answer under `ConnectTimeout` too."""
    return not any(isinstance(cause, NOT_SENT) for cause in _causes(exc))


def _timed_out(exc: openai.APIConnectionError) -> bool:
    """Whether a sent attempt ran out of time waiting for its answer (not a connection the server cut)."""
    return any(isinstance(cause, aiohttp.SocketTimeoutError) for cause in _causes(exc))


@dataclass
class Strikes:
    """A call's timeouts while its provider answered others."""

    count: int = 0


class LlmClient:
    """`await LlmClient(config, provider).complete(params, meter)`: one call, tried again on transient
    failures, every attempt counted in `meter`."""

    def __init__(self, config: LlmAdapter, provider: Provider) -> None:
        self._config = config
        self._provider = provider
        self._sdk, self._secret = provider.client(config)
        self._limits = provider.limits(config)

    @property
    def attempts(self) -> int:
        return self._config.max_retries + 1

    async def complete(self, params: dict[str, Any], meter: Meter) -> ChatCompletion:
        """One chat completion, tried again on transient failures; LlmStepError when none came."""
        config = self._config
        strikes = Strikes()
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
                    return await self._attempt(params, meter, strikes)
        except openai.APIStatusError as exc:
            self._raise_for(exc)
        except openai.APIConnectionError as exc:
            if strikes.count:
                raise self._timed_out(strikes) from exc
            raise ProviderUnavailable(
                f"provider unavailable after {self.attempts} attempts: "
                f"{describe(exc, config.base_url, self._secret)}"
            ) from exc
        except openai.APIError as exc:  # an answer the SDK could not read as a completion
            raise LlmStepError(f"unreadable answer: {describe(exc, config.base_url, self._secret)}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(self, params: dict[str, Any], meter: Meter, strikes: Strikes) -> ChatCompletion:
        """One HTTP call, inside the provider's limits, counted whatever comes of it."""
        began = time.monotonic()
        try:
            completion = await self._call(params)
        except openai.APIConnectionError as exc:
            if _sent(exc):
                await self._count_unanswered(params, meter)
            if _timed_out(exc):
                await self._strike(strikes, time.monotonic() - began, meter)
            raise
        except openai.RateLimitError:
            if self._limits is not None:
                await self._limits.throttled()
            raise
        except openai.APIStatusError as exc:
            detail = describe(exc, self._config.base_url, self._secret)
            if "response_format" in params and refuses_format(exc):
                raise FormatRefused(f"the response format was refused: {detail}", exc.status_code) from exc
            if "max_tokens" in params and exc.status_code == 400 and "max_tokens" in detail:
                raise ParamRefused(f"max_tokens was refused: {detail}", exc.status_code) from exc
            raise
        await self._provider.answered()
        if not meter.measured(completion):
            await self._count_unmetered(params, completion, meter)
        if self._limits is not None and completion.usage is not None:
            await self._limits.spend(completion.usage.total_tokens)
        return completion

    async def _call(self, params: dict[str, Any]) -> ChatCompletion:
        if self._limits is None:
            return await self._post(params)
        async with self._limits.call():
            return await self._post(params)

    async def _post(self, params: dict[str, Any]) -> ChatCompletion:
        """POST /chat/completions through the client: what `chat.completions.create` sends, without its
        walk of the parameters against their typed definitions (a third of a millisecond per call for
        a schema-sized body), which changes nothing in the plain JSON the steps build."""
        return await self._sdk.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            body=params,
            options={"timeout": self._config.timeout_s},
        )

    async def _prompt_tokens(self, params: dict[str, Any]) -> int:
        overhead = MESSAGE_OVERHEAD_TOKENS * (len(params.get("messages", [])) + 1)
        return overhead + await self._provider.estimator.count(self._sdk, prompt_text(params))

    async def _count_unanswered(self, params: dict[str, Any], meter: Meter) -> None:
        """An attempt the provider may bill without answering: its prompt, estimated."""
        tokens = await self._prompt_tokens(params)
        meter.estimated(tokens)
        log.info("llm_call_counted_unanswered", provider=self._provider.id, input_tokens=tokens)

    async def _count_unmetered(
        self, params: dict[str, Any], completion: ChatCompletion, meter: Meter
    ) -> None:
        """A completion without usage: its prompt and its answer, estimated."""
        answer = "".join(choice.message.content or "" for choice in completion.choices)
        output_tokens = await self._provider.estimator.count(self._sdk, answer)
        meter.estimated(await self._prompt_tokens(params), output_tokens)

    async def _strike(self, strikes: Strikes, waited_s: float, meter: Meter) -> None:
        """A timeout: a strike against this call when the provider answered others meanwhile, or
        answers the probe (then it is up: the timeout is this call's own)."""
        provider, timeout_s = self._provider, self._config.timeout_s
        answered = await provider.answered_within(waited_s)
        if not answered and not await probe(provider, self._sdk, self._limits, timeout_s, meter):
            return
        strikes.count += 1
        log.warning(
            "llm_call_timed_out_alone",
            provider=self._provider.id,
            strikes=strikes.count,
            of=self._config.timeouts_max,
        )
        if strikes.count >= self._config.timeouts_max:
            raise self._timed_out(strikes)

    def _timed_out(self, strikes: Strikes) -> CallTimedOut:
        return CallTimedOut(
            f"the call timed out {strikes.count} times (after {self._config.timeout_s:g} s each) "
            f"while {self._config.base_url} answered other calls or a probe: the step gives up on it"
        )

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
