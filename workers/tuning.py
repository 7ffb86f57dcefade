"""What a worker process keeps per tuning: its config, store, system repository, lock, adapters, and the
batch its cases' records are flushed to disk in."""

from __future__ import annotations

import asyncio

from service.core import keys
from service.core.io.batch import RedisBatch
from service.core.io.disk_batch import DiskBatch
from service.core.models.tuning import Budget, TuningConfig
from service.core.store import TuningStore
from service.core.system import SystemRepo
from service.kinds.evals.guards.leak import LeakIndex
from service.kinds.evals.split import held_out_ids
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.factory import build_analyzer, build_applier, build_prober, build_runner
from workers.adapters.llm.pool import Providers
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
        disk: DiskBatch,
    ) -> None:
        self.store = store
        self.config: TuningConfig = store.config()
        self.config_mtime_ns = store.config_file.stat().st_mtime_ns
        self.name = self.config.name
        self.repo = SystemRepo(store.repo, store.snapshots, git_timeout_s)
        self.disk = disk
        """The cases' durable writes (records, results), flushed to disk together (a group commit): the
        worker's, shared by its tunings."""
        self.lock = ImprovementsLock(batch.redis, self.name, lock_lease_s, batch=batch)
        self.runner: Runner = build_runner(self.config.runner, host, llm)
        self.analyzer: Analyzer = build_analyzer(self.config.analyzer, host, llm)
        self.applier: Applier = build_applier(self.config.applier, host, llm)
        self.prober: Prober = build_prober(self.config.runner, host)
        self.held_out = held_out_ids(store)
        """Its held-out cases (service.kinds.evals.split): never run as cases, only evaluated."""
        self.leak_index: LeakIndex | None = None
        """The word runs of its cases, for the leak guard (workers.kinds.evals.gate.guard): built once."""
        self._batch = batch
        self._redis = batch.redis

    def is_stale(self) -> bool:
        return self.store.config_file.stat().st_mtime_ns != self.config_mtime_ns

    def current_budget(self) -> Budget:
        """The tuning's budget as registered now (raised budgets count before the worker rebuilds)."""
        return self.store.config().budget if self.is_stale() else self.config.budget

    async def current_version(self) -> str:
        """The current system version: Redis's fenced pointer, else the repository's main."""
        return await self.version_from(await self.version_soon())

    def version_soon(self) -> asyncio.Future[bytes | None]:
        """The read of Redis's pointer, queued with this loop turn's other calls (`version_from` reads
        the version from it)."""
        return self._batch.queue_command("GET", keys.version(self.name))

    async def version_from(self, value: bytes | None) -> str:
        """The current version, from what Redis's pointer held (None: the repository's main, set as the
        pointer unless another worker did first)."""
        if value is not None:
            return str(value.decode())
        head = await self.repo.head()
        await self._redis.set(keys.version(self.name), head, nx=True)
        again = await self._redis.get(keys.version(self.name))
        return str(again.decode()) if again is not None else head
