"""What a worker process keeps per tuning: its config, store, system repository, lock and adapters."""

from __future__ import annotations

from service.core import keys
from service.core.batch import RedisBatch
from service.core.models.tuning import TuningConfig
from service.core.store import TuningStore
from service.core.system import SystemRepo
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.factory import build_analyzer, build_applier, build_prober, build_runner
from workers.adapters.llm import Providers
from workers.adapters.process import AgentHost
from workers.lock import ImprovementsLock


class TuningRuntime:
    """One tuning as a worker process sees it; rebuilt when the registered config changes."""

    def __init__(
        self,
        batch: RedisBatch,
        store: TuningStore,
        lock_lease_s: float,
        host: AgentHost,
        git_timeout_s: float,
        llm: Providers,
    ) -> None:
        self.store = store
        self.config: TuningConfig = store.config()
        self.config_mtime_ns = store.config_file.stat().st_mtime_ns
        self.name = self.config.name
        self.repo = SystemRepo(store.repo, store.snapshots, git_timeout_s)
        self.lock = ImprovementsLock(batch.redis, self.name, lock_lease_s, batch=batch)
        self.runner: Runner = build_runner(self.config.runner, host, llm)
        self.analyzer: Analyzer = build_analyzer(self.config.analyzer, host, llm)
        self.applier: Applier = build_applier(self.config.applier, host, llm)
        self.prober: Prober = build_prober(self.config.runner)
        self._batch = batch
        self._redis = batch.redis

    def is_stale(self) -> bool:
        return self.store.config_file.stat().st_mtime_ns != self.config_mtime_ns

    async def current_version(self) -> str:
        """The current system version: Redis's fenced pointer, else the repository's main."""
        value = await self._batch.command("GET", keys.version(self.name))
        if value is not None:
            return str(value.decode())
        head = await self.repo.head()
        await self._redis.set(keys.version(self.name), head, nx=True)
        again = await self._redis.get(keys.version(self.name))
        return str(again.decode()) if again is not None else head
