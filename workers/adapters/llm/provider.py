"""What one worker process keeps per LLM provider, across every step of every case and goal.

`Providers` is the worker's pool, built once by the worker runtime and closed at its shutdown
(`async with Providers(redis) as providers:`). For each provider (a `base_url` and a `model`) it
keeps a `Provider`: one `openai.AsyncOpenAI` per key variable, whose connections every step
reuses (a client costs an SSL context and a connection pool: too dear to build per step). Its HTTP
transport is aiohttp (the SDK's `DefaultAioHttpClient`, its `aiohttp` extra), not the default
httpx one: its C parser and fewer awaits per request take about a quarter of the fleet's added wall
per call off an event loop shared by every step (`bench llm`); the
fleet-wide limits per configured `concurrency` and `tokens_per_minute`; the response format the
server was found to take (`FormatMemory`); its tokenizer (`Estimator`); and when it last answered a
call (`answered`), here and, at most once a second, for the fleet in Redis: a call that times out
while the provider answers others is its own step's fault, not an outage. When no other call answered
(the last case standing has none to compare with), the provider is asked a one-token question before
it is called down (workers.adapters.llm.probe).

The pool itself (`workers.adapters.llm.pool`) is kept apart from this module, so that a worker whose
tunings use no model never loads the SDK.
"""

from __future__ import annotations

import os
import time

import openai
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import ConfigError
from service.core.io.lua import NOW
from service.core.models.tuning import LlmAdapter
from workers.adapters.llm.errors import MissingApiKey
from workers.adapters.llm.formats import FormatMemory
from workers.adapters.llm.limits import ProviderLimits
from workers.adapters.llm.tokens import Estimator

log = structlog.get_logger()

NO_KEY = "no-key"
"""What is sent as the key to a server configured with `api_key_env: null`."""
MARK_EVERY_S = 1.0
"""A worker marks its provider's latest answer in Redis at most this often."""
MARK_TTL_MS = 600_000

MARK = f"""
-- KEYS: answered ; ARGV: ttl_ms
{NOW}
redis.call('SET', KEYS[1], now, 'PX', ARGV[1])
return now
"""
SINCE = f"""
-- KEYS: answered -> milliseconds since the provider last answered anyone, -1 if not within the TTL
{NOW}
local at = redis.call('GET', KEYS[1])
if not at then return -1 end
return now - tonumber(at)
"""


def check_limits(config: LlmAdapter, redis: Redis | None) -> None:
    """A config with fleet-wide limits needs a Redis to keep them in (every fleet worker has one)."""
    if redis is None and (config.concurrency is not None or config.tokens_per_minute is not None):
        raise ConfigError(
            f"llm {config.model} at {config.base_url}: concurrency and tokens_per_minute are kept in "
            "the fleet's Redis, and none was given"
        )


class Provider:
    """One provider as this worker sees it (see the module's docstring)."""

    def __init__(self, base_url: str, model: str, redis: Redis | None) -> None:
        self.id = keys.llm_provider(base_url, model)
        self.base_url = base_url
        self.model = model
        self.formats = FormatMemory(self.id, redis)
        self.estimator = Estimator(base_url, model)
        self.max_tokens_param = "max_tokens"
        """How `max_output_tokens` is sent: `max_tokens`, which every server knows, until the server
        refuses it (OpenAI's reasoning models): then `max_completion_tokens`, for the worker's life."""
        self._redis = redis
        self._clients: dict[str | None, tuple[openai.AsyncOpenAI, str]] = {}
        self._retired: list[openai.AsyncOpenAI] = []
        """Clients replaced after their key changed: steps may still be calling through them, so they
        are closed with the rest at the worker's shutdown (an aiohttp session left open warns)."""
        self._limits: dict[tuple[int | None, int | None], ProviderLimits | None] = {}
        self._answered_s = float("-inf")
        self._marked_s = float("-inf")
        self._mark = redis.register_script(MARK) if redis is not None else None
        self._since = redis.register_script(SINCE) if redis is not None else None

    def client(self, config: LlmAdapter) -> tuple[openai.AsyncOpenAI, str]:
        """The client for the config's key variable, and the key (to mask in messages); MissingApiKey
        when the variable is not set."""
        name = config.api_key_env
        key = NO_KEY
        if name is not None:
            key = os.environ.get(name, "")
            if not key:
                raise MissingApiKey(
                    f"the environment variable {name} (api_key_env) is not set on this worker: "
                    f"it must hold the API key for {config.base_url}"
                )
        held = self._clients.get(name)
        if held is None or held[1] != key:
            if held is not None:
                log.info("llm_client_key_changed", provider=self.id, variable=name)
            sdk = openai.AsyncOpenAI(
                api_key=key,
                base_url=self.base_url,
                timeout=config.timeout_s,
                max_retries=0,
                http_client=openai.DefaultAioHttpClient(timeout=config.timeout_s),
            )
            if held is None:  # made by a warm-up thread meanwhile (`warm`): that one is kept
                held = self._clients.setdefault(name, (sdk, key))
            else:
                self._retired.append(held[0])
                held = self._clients[name] = (sdk, key)
        return held

    def warm(self, config: LlmAdapter) -> None:
        """Make the config's client (its aiohttp transport imported) and load what the SDK loads at a
        client's first call (its chat resources), in the calling thread: a worker's prepare runs it in the
        thread that imports the SDK, so that its first LLM step does not hold the event loop (every other
        job's steps and heartbeats) for a tenth of a second. A client the loop made meanwhile is kept (an
        unused one holds no connection). It never fails the job: what it cannot do (an unset key, a client
        the SDK refuses to make) is left to the step, which meets it again and names it."""
        try:
            sdk, _ = self.client(config)
            _ = sdk.chat.completions  # the chat resources: imported at their first access
        except Exception as exc:  # a warm-up only: the step meets the error again and reports it, masked
            log.info("llm_warm_skipped", provider=self.id, error=type(exc).__name__)

    def limits(self, config: LlmAdapter) -> ProviderLimits | None:
        """The fleet-wide limits the config sets (None: none)."""
        wanted = (config.concurrency, config.tokens_per_minute)
        if wanted not in self._limits:
            check_limits(config, self._redis)
            unset = config.concurrency is None and config.tokens_per_minute is None
            limits = None if unset or self._redis is None else ProviderLimits(self._redis, config)
            self._limits[wanted] = limits
        return self._limits[wanted]

    async def answered(self) -> None:
        """A call was answered: note it here, and for the fleet at most once per MARK_EVERY_S."""
        now_s = time.monotonic()
        self._answered_s = now_s
        if self._mark is None or now_s - self._marked_s < MARK_EVERY_S:
            return
        self._marked_s = now_s
        try:
            await self._mark([keys.llm_answered(self.id)], [MARK_TTL_MS])
        except RedisError as exc:
            log.warning("llm_answer_not_marked", provider=self.id, error=str(exc))

    async def answered_within(self, window_s: float) -> bool:
        """Whether the provider answered any call (of this worker, or of the fleet) in the last
        `window_s` seconds."""
        if time.monotonic() - self._answered_s <= window_s:
            return True
        if self._since is None:
            return False
        try:
            since_ms = int(await self._since([keys.llm_answered(self.id)]))
        except RedisError as exc:
            log.warning("llm_answer_not_read", provider=self.id, error=str(exc))
            return False
        return 0 <= since_ms <= window_s * 1000

    async def aclose(self) -> None:
        for limits in self._limits.values():
            if limits is not None:
                await limits.aclose()
        for sdk in [*self._retired, *(sdk for sdk, _ in self._clients.values())]:
            await sdk.close()
        self._clients.clear()
        self._retired.clear()
