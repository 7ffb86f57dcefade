"""The Python client: submit cases, read status and results. Owns its Redis connection.

    async with TunefleetClient(settings) as client:
        report = await client.submit_path("demo", Path("cases/"))
        status = await client.status()
        rows = await client.results("demo")

It configures no logging (see service.core.logs).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from arq.connections import ArqRedis

from service.client.queries import case_detail, fleet_status, results, tuning_hold
from service.client.submission import SUBMIT_BATCH, read_case_files, write_cases
from service.client.versions import Versions
from service.core import keys
from service.core.errors import TunefleetError
from service.core.events import EventSink
from service.core.io.connection import connect
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.jobs import CASE_FUNCTION, CaseJob
from service.core.models.records import COST_SCALE, CancelRequest, CaseResult
from service.core.models.status import (
    CaseDetail,
    FleetStatus,
    Hold,
    ResultRow,
    RunningCase,
    SubmitReport,
)
from service.core.models.tuning import TuningConfig
from service.core.settings import FleetSettings
from service.core.startup import check_redis_address
from service.core.store import CaseStore, Store, TuningStore
from service.kinds.cases.fleet import enqueue_cases
from service.kinds.evals.fleet import Evals
from service.kinds.evals.split import held_out_ids
from service.kinds.goals.fleet import Goals
from service.kinds.registry import counter_rules

__all__ = ["SUBMIT_BATCH", "TunefleetClient"]


class TunefleetClient:
    """A connection to one fleet (its Redis and its store)."""

    def __init__(self, settings: FleetSettings, redis: ArqRedis | None = None) -> None:
        self.settings = settings
        self.store = Store(settings.store)
        self._redis = redis
        self._owns_redis = redis is None

    @property
    def redis(self) -> ArqRedis:
        if self._redis is None:
            raise TunefleetError("the client is not open: use `async with TunefleetClient(...)`")
        return self._redis

    async def __aenter__(self) -> Self:
        if self._redis is None:
            check_redis_address(self.settings)  # a ConfigError naming the URL, not arq's error
            self._redis = await connect(self.settings)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._redis is not None and self._owns_redis:
            await self._redis.aclose()
        self._redis = None

    @property
    def goals(self) -> Goals:
        """Start, list, read and cancel goal runs (service.kinds.goals.fleet)."""
        return Goals(self.redis, self.store, self.settings)

    @property
    def evals(self) -> Evals:
        """Create, list, read, compare and cancel evaluations (service.kinds.evals.fleet)."""
        return Evals(self.redis, self.store, self.settings)

    @property
    def versions(self) -> Versions:
        """A tuning's versions, diffs and the reasons behind them (service.client.versions)."""
        return Versions(self.redis, self.store)

    def _sink(self) -> EventSink:
        return EventSink(self.redis, self.store, self.settings.events_max, counter_rules(self.settings))

    def tuning_store(self, name: str) -> TuningStore:
        """The tuning's folder; UnknownTuningError when it is not registered."""
        return self.store.known_tuning(name)

    async def register(self, tuning_file: Path) -> TuningConfig:
        """Register (or update) a tuning from its file; its system is imported once."""
        from service.client.tunings import load_tuning_file, register  # YAML and git: only when registering

        config = load_tuning_file(tuning_file)
        version = await register(self.store.tuning(config.name), config, str(tuning_file))
        await self.redis.sadd(keys.tunings(), config.name)  # type: ignore[misc]
        await self.redis.set(keys.version(config.name), version, nx=True)
        await self._release_if_within_budget(config)
        return config

    async def _release_if_within_budget(self, config: TuningConfig) -> None:
        """Release a budget hold that the tuning's (new) budget no longer holds."""
        raw = await self.redis.hget(keys.held(), config.name)  # type: ignore[misc]
        hold = Hold.parse(raw) if raw is not None else None
        if hold is None or hold.kind != "budget":
            return
        tokens, micros = await self.redis.hmget(keys.stats(config.name), ["tokens", "cost_usd_micros"])  # type: ignore[misc]
        if config.budget.tuning_over(int(tokens or 0), int(micros or 0) / COST_SCALE) is None:
            await self._release(config.name, "the budget was raised")

    async def submit(self, tuning: str, case: Case) -> bool:
        """Submit one case; False when the same (tuning, case, rev) is already queued, running or done."""
        tuning_store = self.tuning_store(tuning)
        if case.id in held_out_ids(tuning_store):
            return False  # held out: never tuned on (service.kinds.evals.split)
        store = tuning_store.case(case.id, case.rev)
        existing = store.load_case()
        if existing is None:
            store.write_case(case)
        done = store.result()
        if done is not None:
            return done.state == "failed" and await self._run_again(tuning, store)
        job = CaseJob(tuning=tuning, case=case.id, rev=case.rev)
        enqueued = await self.redis.enqueue_job(CASE_FUNCTION, job.model_dump(), _job_id=job.job_id)
        if enqueued is None:
            return False
        await self._sink().emit(EventKind.CASE_QUEUED, tuning, case=case.id, rev=case.rev)
        return True

    async def _run_again(self, tuning: str, case_store: CaseStore) -> bool:
        """Give a `failed` case another go: its failure is archived, its recorded steps kept."""
        result = case_store.result()
        if result is None or result.state != "failed":
            return False
        job = CaseJob(tuning=tuning, case=case_store.case_id, rev=case_store.rev)
        case_store.archive_failure()
        await self.redis.delete(keys.arq_result(job.job_id))
        await self.redis.hincrby(keys.stats(tuning), "state:failed", -1)  # type: ignore[misc]
        if not await self.redis.enqueue_job(CASE_FUNCTION, job.model_dump(), _job_id=job.job_id):
            return False
        await self._sink().emit(
            EventKind.CASE_REQUEUED,
            tuning,
            case=job.case,
            rev=job.rev,
            detail=f"failed before: {result.reason}",
        )
        return True

    async def submit_many(self, tuning: str, cases: list[Case], rerun_failed: bool = True) -> list[bool]:
        """Submit cases in batches of SUBMIT_BATCH, with the result of `submit` for each (a rev that ended
        `failed` runs again unless `rerun_failed` is off: a daemon start bounds those). A batch's case
        files are written from SUBMIT_THREADS threads and flushed to disk together (`publish_temps`)
        while the batch before is enqueued; once they are whole and durable under their names, the batch
        is enqueued in one round trip (the checks of arq's enqueue_job, made in one script per case) and
        its events are emitted in another."""
        tuning_store = self.tuning_store(tuning)
        held = held_out_ids(tuning_store)
        if held and any(case.id in held for case in cases):  # never tuned on: never enqueued as a case
            kept = [case for case in cases if case.id not in held]
            accepted_kept = iter(await self.submit_many(tuning, kept, rerun_failed))
            return [False if case.id in held else next(accepted_kept) for case in cases]
        batches = [cases[start : start + SUBMIT_BATCH] for start in range(0, len(cases), SUBMIT_BATCH)]
        if not batches:
            return []
        # A batch's stores are made when its writing starts: made all at once, those of a start of
        # thousands of cases held the event loop (and the daemon's lease renewal) 0.2 to 0.5 s here.
        stores = [[tuning_store.case(case.id, case.rev) for case in batches[0]]]
        accepted: list[bool] = []
        writing = asyncio.create_task(self._write_cases(tuning_store.root, stores[0], batches[0]))
        try:
            for k, batch in enumerate(batches):
                done = await writing
                if k + 1 < len(batches):
                    stores.append([tuning_store.case(case.id, case.rev) for case in batches[k + 1]])
                    following = self._write_cases(tuning_store.root, stores[k + 1], batches[k + 1])
                    writing = asyncio.create_task(following)
                enqueued = await self._enqueue_batch(tuning, stores[k], batch, done, rerun_failed)
                await self._emit_queued(tuning, batch, done, enqueued)
                accepted += enqueued
        finally:
            # After a failure, the batch written meanwhile is on disk without its jobs, as after a crash
            # (the daemon's reconciliation enqueues such cases); no thread of it outlives this call.
            await asyncio.gather(writing, return_exceptions=True)
        return accepted

    async def _write_cases(
        self, staging: Path, stores: list[CaseStore], cases: list[Case]
    ) -> list[CaseResult | None]:
        """Write the case files of a batch that are not on disk yet, durably, through temp files in
        `staging`; the result each rev already has."""
        return await write_cases(staging, stores, cases, self.store.root)

    async def _enqueue_batch(
        self,
        tuning: str,
        stores: list[CaseStore],
        cases: list[Case],
        done: list[CaseResult | None],
        rerun_failed: bool = True,
    ) -> list[bool]:
        """Enqueue the cases of a batch whose files are on disk (`failed` ones run again, with their
        case_requeued event); accepted or not."""
        accepted = [False] * len(cases)
        fresh = [i for i, result in enumerate(done) if result is None]
        for i, result in enumerate(done):
            if rerun_failed and result is not None and result.state == "failed":
                accepted[i] = await self._run_again(tuning, stores[i])
        jobs = [CaseJob(tuning=tuning, case=cases[i].id, rev=cases[i].rev) for i in fresh]
        enqueued = await enqueue_cases(self.redis, self.settings.queue, jobs, int(time.time() * 1000))
        for i, ok in zip(fresh, enqueued, strict=True):
            accepted[i] = ok
        return accepted

    async def _emit_queued(
        self, tuning: str, cases: list[Case], done: list[CaseResult | None], enqueued: list[bool]
    ) -> None:
        """The case_queued events of a batch's new cases that were enqueued (re-runs have their own)."""
        queued = [
            {"case": case.id, "rev": case.rev}
            for case, result, ok in zip(cases, done, enqueued, strict=True)
            if ok and result is None
        ]
        await self._sink().emit_many(EventKind.CASE_QUEUED, tuning, queued)

    async def submit_path(self, tuning: str, path: Path, rerun_failed: bool = True) -> SubmitReport:
        """Validate every case file at `path` first; refuse the bad ones by name and enqueue the rest
        (`rerun_failed`: see submit_many)."""
        self.tuning_store(tuning)
        # Parsing thousands of YAML files takes seconds: off the event loop, so that what shares the loop
        # (the daemon's lease renewal, its API) keeps its beat while a big folder is read.
        cases, refused = await asyncio.to_thread(read_case_files, path, self.settings.case_max_bytes)
        report = SubmitReport(refused=refused)
        held = held_out_ids(self.tuning_store(tuning))
        report.held_out = [f"{case.id}@{case.rev}" for case in cases if case.id in held]
        cases = [case for case in cases if case.id not in held]
        for case, accepted in zip(cases, await self.submit_many(tuning, cases, rerun_failed), strict=True):
            (report.accepted if accepted else report.duplicates).append(f"{case.id}@{case.rev}")
        return report

    async def requeue_failed(self, tuning: str, max_reruns: int | None = None) -> list[str]:
        """Give every `failed` case of a tuning another go; the ids requeued. With `max_reruns` (a daemon
        start), only the cases whose earlier failures (their `failed-<n>.json` archives) are fewer."""
        requeued = []
        for case_store in await asyncio.to_thread(_ended, self.tuning_store(tuning), max_reruns):
            if await self._run_again(tuning, case_store):
                requeued.append(case_store.case_id)
        return requeued

    async def cancel(self, tuning: str, case: str | None = None) -> list[str]:
        """Cancel one case or every unfinished case of a tuning; the job ids cancelled.

        Queued cases end `cancelled` here and now; running ones are stopped by their worker within a
        poll (their agents get the grace period) and end `cancelled` there. Nothing else is touched.
        """
        targets = await asyncio.to_thread(self.tuning_store(tuning).unfinished, case)
        jobs = [CaseJob(tuning=tuning, case=c.case_id, rev=c.rev) for c in targets]
        if not jobs:
            return []
        await self.redis.sadd(keys.cancelled(tuning), *[j.job_id for j in jobs])  # type: ignore[misc]
        leased = await self.redis.mget([keys.lease(j.job_id) for j in jobs])
        for case_store, job, lease in zip(targets, jobs, leased, strict=True):
            if lease is not None:  # its worker ends it; the store keeps the cancel should Redis lose it
                await asyncio.to_thread(case_store.request_cancel, CancelRequest())
                continue
            case_store.write_result(
                CaseResult(
                    case=job.case,
                    rev=job.rev,
                    state="cancelled",
                    reason="cancelled before it started",
                )
            )
            await self.redis.zrem(self.settings.queue, job.job_id)
            await self.redis.delete(keys.arq_job(job.job_id))
            await self._sink().emit(
                EventKind.CASE_CANCELLED,
                tuning,
                case=job.case,
                rev=job.rev,
                detail="cancelled before it started",
            )
        return [j.job_id for j in jobs]

    async def pause(self) -> None:
        """No run starts anywhere in the fleet until `resume` (running steps finish)."""
        await self.redis.set(keys.paused(), "1")

    async def resume(self, tuning: str | None = None) -> bool:
        """Resume the fleet after `pause`; or, given a tuning, release its hold (True if it was held).
        A budget hold's budget is waived: the tuning is not held for it again until another budget is
        registered."""
        if tuning is None:
            await self.redis.delete(keys.paused())
            return True
        config = self.tuning_store(tuning).config()
        raw = await self.redis.hget(keys.held(), tuning)  # type: ignore[misc]
        if raw is None:
            return False
        hold = Hold.parse(raw)
        if hold is not None and hold.kind == "budget":
            await self.redis.hset(keys.budget_waived(), tuning, config.budget.model_dump_json())  # type: ignore[misc]
        return await self._release(tuning, "resumed")

    async def _release(self, tuning: str, why: str) -> bool:
        if not await self.redis.hdel(keys.held(), tuning):  # type: ignore[misc]
            return False
        await self._sink().emit(EventKind.TUNING_RELEASED, tuning, detail=why)
        return True

    async def running(self, tuning: str) -> dict[str, RunningCase]:
        """The cases of a tuning under way now: job id -> where each is (an unreadable entry left out)."""
        raw = await self.redis.hgetall(keys.running(tuning))  # type: ignore[misc]
        parsed = {job.decode(): RunningCase.parse(value) for job, value in raw.items()}
        return {job: entry for job, entry in parsed.items() if entry is not None}

    async def status(self) -> FleetStatus:
        return await fleet_status(self.redis, self.settings.queue)

    async def results(self, tuning: str, hold: Hold | None = None) -> list[ResultRow]:
        """One row per case, read from the store (no Redis needed); unfinished ones name `hold` (see
        `hold`) as what they wait for."""
        return await asyncio.to_thread(results, self.tuning_store(tuning), hold)

    async def hold(self, tuning: str) -> Hold | None:
        """The tuning's hold, while it has one: no run of it starts until `resume(tuning)`."""
        return await tuning_hold(self.redis, tuning)

    async def show(self, tuning: str, case: str) -> CaseDetail:
        """Every try of a case, read from the store (no Redis needed)."""
        detail = await asyncio.to_thread(case_detail, self.tuning_store(tuning), case)
        if detail is None:
            raise TunefleetError(f"tuning {tuning!r} has no case {case!r}")
        return detail


def _ended(tuning: TuningStore, max_reruns: int | None) -> list[CaseStore]:
    """The newest revs that have a result, less those that failed `max_reruns` times or more (their
    `failed-<n>.json` archives); unfinished ones are the daemon's reconciliation's to enqueue. A walk of
    every case folder, run in a thread (as `TuningStore.unfinished`)."""
    return [
        case_store
        for case_store in tuning.latest_revs()
        if case_store.result_file.exists()
        and (max_reruns is None or len(list(case_store.root.glob("failed-*.json"))) < max_reruns)
    ]
