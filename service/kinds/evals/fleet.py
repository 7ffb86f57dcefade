"""Evaluations as the client, the CLI, the HTTP API and the daemon handle them: create (check the
input, resolve the version, keep the cases, enqueue one job per item), cancel, read, compare, and put
back into Redis what the store knows when Redis lost it.

Every check comes before anything is written or queued: bad input gets one EvalInputError line and
leaves no trace.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from pathlib import Path

import structlog
from arq.connections import ArqRedis

from service.core import keys
from service.core.events import EventSink
from service.core.io.idle import idle
from service.core.models.case import Case, is_slug
from service.core.settings import FleetSettings
from service.core.store import Store, TuningStore
from service.kinds.evals.compare import compare
from service.kinds.evals.counters import EVAL_CREATED, ITEM_ENDED
from service.kinds.evals.errors import EvalError, EvalInputError
from service.kinds.evals.gate.report import restored_counters
from service.kinds.evals.models import (
    EVAL_FUNCTION,
    REPEATS_MAX,
    Comparison,
    EvalCaseRef,
    EvalHead,
    EvalProgress,
    EvalResults,
    EvalSpec,
    ItemResult,
    Purpose,
)
from service.kinds.evals.names import reserved
from service.kinds.evals.progress import eval_progress, stored_counters
from service.kinds.evals.results import read_results
from service.kinds.evals.retired import RetiredEvals
from service.kinds.evals.split import Part, eval_cases
from service.kinds.evals.store import EvalsStore, EvalStore
from service.kinds.evals.versions import resolve_version
from service.kinds.registry import counter_rules

log = structlog.get_logger()

ENQUEUE_AT_ONCE = 100
"""Item jobs enqueued concurrently (arq enqueues one job per round trip)."""


class EvalFiles:
    """The evaluations as the store keeps them (no Redis needed)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.folder = EvalsStore(store.root / "evals")
        self.retired = RetiredEvals(self.folder.root)

    def known(self, eval_id: str) -> EvalStore:
        return self.folder.known(eval_id)

    def results(self, eval_id: str) -> EvalResults:
        """The evaluation's results, read from its items' folders."""
        return read_results(self.known(eval_id))

    def compare(self, before: str, after: str) -> Comparison:
        """Evaluation `after` against `before`, case by case."""
        return compare(self.results(before), self.results(after))

    def specs(self, tuning: str | None = None) -> list[EvalSpec]:
        """Every evaluation's spec (of one tuning), oldest first."""
        specs = [found.spec() for found in self.folder.all()]
        return sorted(
            (s for s in specs if tuning is None or s.tuning == tuning), key=lambda s: (s.created_at, s.id)
        )


class Evals(EvalFiles):
    """The fleet's evaluations, through one Redis connection and the store."""

    def __init__(self, redis: ArqRedis, store: Store, settings: FleetSettings) -> None:
        super().__init__(store)
        self._redis = redis
        self._settings = settings

    @property
    def redis(self) -> ArqRedis:
        return self._redis

    def _sink(self) -> EventSink:
        return EventSink(self._redis, self._store, self._settings.events_max, counter_rules(self._settings))

    async def create(
        self,
        tuning: str,
        *,
        version: str = "main",
        cases: Path | None = None,
        split: Part | None = None,
        repeats: int = 1,
        name: str | None = None,
        purpose: Purpose = "user",
    ) -> EvalSpec:
        """Check everything, then keep the evaluation in the store and enqueue its items. An evaluation
        named like an existing one with the same spec is that one (nothing is enqueued twice); with
        another spec it is refused."""
        tuning_store = self._store.known_tuning(tuning)
        if not 1 <= repeats <= REPEATS_MAX:
            raise EvalInputError(f"--repeat {repeats}: expected 1 to {REPEATS_MAX} runs of each case")
        if cases is not None and split is not None:
            raise EvalInputError(
                "--cases and --split: give one of them (a folder of cases, or a part of the split)"
            )
        if name is not None and not is_slug(name):
            raise EvalInputError(
                f"--name {name!r}: expected a safe slug "
                "(lower-case letters, digits, '.', '_', '-'; at most 128)"
            )
        if name is not None and purpose == "user" and reserved(name):
            raise EvalInputError(
                f"--name {name}: names ending in .holdout-initial or .holdout-final and names starting "
                "with gate- are the fleet's own; choose another name"
            )
        source, folder, chosen = eval_cases(tuning_store, cases, split)
        commit = await resolve_version(self._redis, tuning_store, version, self._settings.git_timeout_s)
        spec = EvalSpec(
            id=name or _new_id(tuning),
            tuning=tuning,
            name=name,
            purpose=purpose,
            version_asked=version,
            version=commit,
            source=source,
            folder=folder,
            cases=[EvalCaseRef(id=case.id, rev=case.rev) for case in chosen],
            repeats=repeats,
            created_at=datetime.now(UTC),
        )
        existing = self.folder.eval(spec.id)
        if existing.exists():
            known = existing.spec()
            if known.model_dump(exclude={"created_at", "name"}) != spec.model_dump(
                exclude={"created_at", "name"}
            ):
                raise EvalInputError(
                    f"--name {spec.id}: another evaluation has this id (of tuning {known.tuning}, version "
                    f"{known.version[:12]}); choose another name"
                )
            await self._redis.hsetnx(keys.evals(), known.id, EvalHead.of(known).model_dump_json())  # type: ignore[misc]
            await self.reconcile_one(existing)
            return known
        await self._start(existing, spec, chosen)
        return spec

    async def launch(self, spec: EvalSpec, chosen: list[Case]) -> EvalSpec:
        """Keep and enqueue an evaluation whose spec was built elsewhere (the acceptance gate's,
        service.kinds.evals.gate); one already kept under its id is that one (its missing items enqueued
        again)."""
        existing = self.folder.eval(spec.id)
        if existing.exists():
            known = existing.spec()
            # its cases may differ (a resumed gate chooses again): what makes it the fleet's is who
            # asked, for which tuning, on which version
            whose = ("tuning", "purpose", "version", "source")
            if known.model_dump(include=set(whose)) != spec.model_dump(include=set(whose)):
                raise EvalError(
                    f"evaluation {spec.id}: the store holds another evaluation under this id (tuning "
                    f"{known.tuning}, purpose {known.purpose}, version {known.version[:12]}); not reused"
                )
            await self.reconcile_one(existing)
            return known
        await self._start(existing, spec, chosen)
        return spec

    async def _start(self, target: EvalStore, spec: EvalSpec, chosen: list[Case]) -> None:
        self._keep(target, spec, chosen)
        await self._redis.hset(keys.evals(), spec.id, EvalHead.of(spec).model_dump_json())  # type: ignore[misc]
        await self._sink().emit(
            EVAL_CREATED,
            spec.tuning,
            detail=f"{spec.total} items: {len(chosen)} cases x {spec.repeats} on {spec.version[:12]}",
            data={"eval": spec.id, "items": spec.total, "version": spec.version, "purpose": spec.purpose},
        )
        queued = await self._enqueue(spec, [(case.id, k) for case, k in spec.items()])
        log.info("eval_queued", eval=spec.id, tuning=spec.tuning, items=queued, version=spec.version)

    def _keep(self, target: EvalStore, spec: EvalSpec, chosen: list[Case]) -> None:
        """The cases, then the spec (the spec makes the evaluation: without it nothing was)."""
        for case in chosen:
            target.write_case(case)
        target.write_spec(spec)

    async def _enqueue(self, spec: EvalSpec, items: list[tuple[str, int]]) -> int:
        """Enqueue these items' jobs (their finished job's arq keys removed first); how many were."""
        queued = 0
        for start in range(0, len(items), ENQUEUE_AT_ONCE):
            jobs = [spec.job(case, repeat) for case, repeat in items[start : start + ENQUEUE_AT_ONCE]]
            async with self._redis.pipeline(transaction=False) as pipe:
                for job in jobs:
                    pipe.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id))
                await pipe.execute()
            answers = await asyncio.gather(
                *(
                    self._redis.enqueue_job(EVAL_FUNCTION, job.model_dump(), _job_id=job.job_id)
                    for job in jobs
                )
            )
            queued += sum(1 for answer in answers if answer is not None)
        return queued

    async def cancel(self, eval_id: str) -> int:
        """Cancel an evaluation's unfinished items: a queued one ends `cancelled` here, a running one
        within a poll on its worker; how many were cancelled."""
        found = self.known(eval_id)
        spec = found.spec()
        outcomes = found.scan().outcomes
        pending = [(case.id, k) for case, k in spec.items() if (case.id, k) not in outcomes]
        if not pending:
            return 0
        jobs = [spec.job(case, repeat) for case, repeat in pending]
        await self._redis.sadd(keys.cancelled(spec.tuning), *[job.job_id for job in jobs])  # type: ignore[misc]
        leases = await self._redis.mget([keys.lease(job.job_id) for job in jobs])
        sink = self._sink()
        for job, lease in zip(jobs, leases, strict=True):
            if lease is not None:
                continue  # its worker ends it
            rev = next(c.rev for c in spec.cases if c.id == job.case)
            item = found.item(job.case, rev, job.repeat)
            item.root.mkdir(parents=True, exist_ok=True)
            item.write_outcome(
                ItemResult(
                    case=job.case,
                    rev=rev,
                    repeat=job.repeat,
                    state="cancelled",
                    reason="cancelled before it started",
                    voids=len(item.voids()),
                    version=spec.version,
                )
            )
            await self._redis.zrem(self._settings.queue, job.job_id)
            await self._redis.delete(keys.arq_job(job.job_id))
            await sink.emit(
                ITEM_ENDED,
                spec.tuning,
                case=job.case,
                detail="cancelled before it started",
                data={"eval": spec.id, "repeat": job.repeat, "outcome": "cancelled"},
            )
        return len(jobs)

    async def progress(self) -> list[EvalProgress]:
        """Every evaluation Redis knows, with its live counters (two round trips), and those gc retired
        from Redis (service.kinds.evals.retired), oldest first."""
        return await eval_progress(self._redis, lambda: asyncio.to_thread(self.retired.read))

    def stored_counters(self, tuning: TuningStore) -> dict[str, int]:
        """The live counters of a tuning's evaluations (`progress`) and of its gates as the store gives
        them, with the corrections that make the gates' spend count once (gate.report)."""
        specs = self.specs(tuning.name)
        retired = self.retired.ids()
        counts = stored_counters([read_results(self.folder.eval(spec.id)) for spec in specs], retired)
        for field, value in restored_counters(tuning).items():
            counts[field] = counts.get(field, 0) + value
        return counts

    async def reconcile(self) -> int:
        """Enqueue every unfinished item with no queue entry and no lease (Redis lost it, say), and put
        back each evaluation's head Redis lost (not those gc retired: service.kinds.evals.retired); how
        many items were enqueued."""
        known = {name.decode() for name in await self._redis.hkeys(keys.evals())}  # type: ignore[misc]
        known |= await asyncio.to_thread(self.retired.ids)  # ended, and gc removed them from Redis
        enqueued = 0
        for found in list(self.folder.all()):
            if found.run_id not in known:
                head = EvalHead.of(found.spec()).model_dump_json()
                await self._redis.hset(keys.evals(), found.run_id, head)  # type: ignore[misc]
            enqueued += await self.reconcile_one(found)
        return enqueued

    async def reconcile_one(self, found: EvalStore) -> int:
        """Enqueue the evaluation's unfinished items that are neither queued nor leased; how many."""
        if found.results_file.exists():
            return 0  # ended: nothing to enqueue
        spec = found.spec()
        outcomes = found.scan().outcomes
        missing = [(case.id, k) for case, k in spec.items() if (case.id, k) not in outcomes]
        if not missing:
            read_results(found)  # keeps RESULTS.json: the next rounds need not walk it again
            return 0
        job_ids = [spec.job(case, repeat).job_id for case, repeat in missing]
        free = await idle(self._redis, self._settings.queue, job_ids)
        orphans = [item for item, is_idle in zip(missing, free, strict=True) if is_idle]
        if not orphans:
            return 0
        enqueued = await self._enqueue(spec, orphans)
        if enqueued:
            log.info(
                "eval_requeued",
                eval=spec.id,
                items=enqueued,
                detail="reconciled: no queue entry and no lease",
            )
        return enqueued


def _new_id(tuning: str) -> str:
    """A fresh evaluation id: the tuning, the time and a random tail."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{tuning[:100]}-{stamp}-{secrets.token_hex(2)}"
