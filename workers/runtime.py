"""Everything one worker process shares between its jobs: settings, Redis, store, breaker, tunings."""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor

import structlog
from arq import Retry
from arq.connections import ArqRedis

from service.core.errors import TunefleetError
from service.core.events import EventSink
from service.core.io.batch import RedisBatch
from service.core.io.disk_batch import DiskBatch
from service.core.models.status import WorkerPresence
from service.core.models.tuning import LlmAdapter
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.registry import counter_rules
from workers.adapters.base import Prober
from workers.adapters.factory import llm_modules_loaded, llm_modules_present, llm_roles
from workers.adapters.llm.pool import Providers
from workers.adapters.process import AgentHost
from workers.breaker import Breaker, BreakerWatch
from workers.control import Controls
from workers.lease import Grant, JobLease
from workers.outage import RedisOutage
from workers.slots import Slots
from workers.store_full import StoreWatch
from workers.tuning import TuningRuntime

log = structlog.get_logger()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class WorkerRuntime:
    """The process-wide state of a worker, built once in `main` and handed to every job."""

    def __init__(self, settings: FleetSettings, redis: ArqRedis, name: str | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.store = Store(settings.store)
        self.name = name or worker_name()
        self.batch = RedisBatch(redis)
        self.sink = EventSink(
            redis,
            self.store,
            settings.events_max,
            counter_rules(settings),
            worker=self.name,
            batch=self.batch,
        )
        self.outage = RedisOutage(settings.outage_backoff_max_s)
        self.breaker = Breaker(redis, settings.breaker_probe_base_s, settings.breaker_probe_max_s)
        self.controls = Controls(redis, settings.poll_delay_s, self.outage)
        self.breaker_watch = BreakerWatch(
            self.breaker, self._prober_for, self.sink, settings.poll_delay_s, 30.0, outage=self.outage
        )
        self.store_watch = StoreWatch(redis, settings, self.sink, self.name)
        """Whether the store (or Redis) is full, as this process last found it: claims stop while it is."""
        self.host = AgentHost.of_worker(settings)
        self.llm = Providers(redis)
        """The LLM providers' clients, limits and formats, shared by every step; closed by `aclose`."""
        self.disk = DiskBatch()
        """The durable writes of the process's jobs (records, results), landed by its writer process (started
        by `main`, ended by `aclose`)."""
        self._tunings: dict[str, TuningRuntime] = {}
        self.leases: dict[str, int] = {}
        """job id -> the lease token this process holds for it (read by the worker's finish_job)."""
        self.suspects: dict[str, str] = {}
        """Job id -> suspicion level ('group' or 'isolate', workers.lease) of the suspects this process
        claimed and that have not cleared yet: the claim takes no suspect that would not fit beside them."""
        self.lock_waits = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="lock-wait")
        """Threads for waits on a lock another process holds (a goal's `.lock`): apart from the folder
        threads (the loop's default executor, one per core), which a frozen holder would otherwise keep
        from every job's folder work for as long as the wait."""
        self.slots = Slots(settings.concurrency)
        """The process's job slots, held by its jobs and lent while they wait on the fleet (workers.slots)."""

    def tuning(self, name: str) -> TuningRuntime:
        current = self._tunings.get(name)
        if current is None or current.is_stale():
            current = TuningRuntime(
                self.batch,
                self.store.tuning(name),
                self.settings.lock_lease_s,
                self.host,
                self.settings.git_timeout_s,
                self.llm,
                self.disk,
            )
            self._tunings[name] = current
        return current

    async def llm_ready(self, tuning: str) -> None:
        """The modules of the tuning's LLM adapters imported and its clients warmed (`models_ready`)."""
        await self.models_ready(self.tuning_models(tuning))

    def tuning_models(self, tuning: str) -> list[LlmAdapter]:
        """The tuning's roles that are a model's, while the LLM modules are not loaded (after, none: they
        are read no more); a config that cannot be read is left to the job's load, which names the problem.
        Nothing is read while the tuning's runtime is built and current (it imported what its adapters
        need): a case start pays a stat at most."""
        if llm_modules_present():
            return []
        built = self._tunings.get(tuning)
        if built is not None and not built.is_stale():
            return []
        try:
            config = self.store.tuning(tuning).config()
        except (OSError, TunefleetError, ValueError):
            return []
        return llm_roles((config.runner, config.analyzer, config.applier))

    async def models_ready(self, models: list[LlmAdapter]) -> None:
        """The LLM adapters' modules imported and the models' clients warmed, in one thread, the first
        time a job needs them (workers.adapters.factory, `Providers.warm`); at once without models."""
        if models:
            await llm_modules_loaded(lambda: self.llm.warm(models))

    async def _prober_for(self, tuning: str) -> Prober:
        return self.tuning(tuning).prober

    async def acquire(self, job_id: str, scope: str, view_of: str | None = None) -> tuple[JobLease, Grant]:
        """The lease of a case (or a goal: any leased job) with its counted lease losses, whether it was
        cancelled (in the `tf:cancelled:<scope>` set: the case's tuning, or `keys.GOALS_SCOPE`), whether
        it is a suspect, and with `view_of` that tuning's run view (workers.lease.RunView); Retry when
        another worker still holds it."""
        lease, grant = await JobLease.acquire(
            self.batch,
            self.settings.queue,
            job_id,
            self.settings.lease_s,
            scope,
            worker=self.name,
            outage=self.outage,
            on_cleared=self._cleared,
            view_of=view_of,
        )
        if lease is None:
            log.info("job_held_elsewhere", job_id=job_id)
            raise Retry(defer=self.settings.lease_s)
        self.controls.scopes[job_id] = scope
        if grant.suspect:
            self.suspects[job_id] = grant.level
        else:
            self.suspects.pop(job_id, None)
        self.leases[job_id] = lease.token
        return lease, grant

    def _cleared(self, job_id: str) -> None:
        self.suspects.pop(job_id, None)

    async def aclose(self) -> None:
        """Close what the process kept open for its steps (the LLM clients' connections, the writer
        process once it has landed what it was sent, the lock-wait threads: a wait under way ends within
        its bound)."""
        await self.llm.aclose()
        await self.disk.aclose()
        self.lock_waits.shutdown(wait=False)

    def describe(self) -> WorkerPresence:
        return WorkerPresence(worker=self.name, slots=self.settings.concurrency, cases=sorted(self.leases))
