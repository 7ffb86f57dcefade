"""The worker's pool of LLM providers, apart from the providers themselves: the runtime holds a pool
from its start, but a `Provider` (and with it the `openai` SDK, about half a second of CPU to import)
is loaded only when a step first asks for one. A worker whose tunings use no model never loads the
SDK: the demo, and most of the tests, which start hundreds of workers.

An adapter built without a pool (a tool, a test) opens one of its own per step (`borrowed`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING

from redis.asyncio import Redis

from service.core.models.tuning import LlmAdapter

if TYPE_CHECKING:
    from workers.adapters.llm.provider import Provider


class Providers:
    """The worker's providers, each made on first use; `aclose()` closes every client."""

    def __init__(self, redis: Redis | None = None) -> None:
        self.redis = redis
        self._providers: dict[tuple[str, str], Provider] = {}

    def get(self, config: LlmAdapter) -> Provider:
        key = (config.base_url, config.model)
        provider = self._providers.get(key)
        if provider is None:
            from workers.adapters.llm.provider import Provider  # the SDK, on first use (module docstring)

            # setdefault: made by a warm-up thread meanwhile (`warm`), that one is kept
            provider = self._providers.setdefault(key, Provider(config.base_url, config.model, self.redis))
        return provider

    def warm(self, configs: Iterable[LlmAdapter]) -> None:
        """Each config's provider made and its client warmed (`Provider.warm`), in the calling thread: a
        job's prepare runs it once, in the thread that imports the SDK (workers.adapters.factory)."""
        for config in configs:
            self.get(config).warm(config)

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()

    async def __aenter__(self) -> Providers:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def borrowed(providers: Providers | None) -> AsyncIterator[Providers]:
    """The worker's pool, or a pool of one step's own, closed after it."""
    if providers is not None:
        yield providers
        return
    async with Providers() as own:
        yield own
