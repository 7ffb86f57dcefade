"""Goals as the client, the CLI, the HTTP API and the daemon handle them: start, cancel, list, read,
and put back into Redis what the store knows when Redis lost it."""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import structlog
from arq.connections import ArqRedis
from pydantic import ValidationError

from service.core import keys
from service.core.errors import TunefleetError, UnknownTuningError
from service.core.events import EventSink
from service.core.io.idle import idle
from service.core.models.events import EventKind
from service.core.models.jobs import GOAL_FUNCTION, GoalJob
from service.core.models.records import CancelRequest
from service.core.settings import FleetSettings
from service.core.store import Store, TuningStore
from service.core.system import SystemRepo
from service.kinds.goals.errors import GoalConflictError
from service.kinds.goals.models import FINAL_STATUSES, GoalLimitsSpec, GoalSpec
from service.kinds.goals.spec import load_goal_file, resolve_agents, resolve_limits
from service.kinds.goals.state import Completion, GoalState, GoalSummary
from service.kinds.goals.store import GoalsStore, GoalStore, starting_state
from service.kinds.registry import counter_rules

log = structlog.get_logger()


class GoalFiles:
    """The goals as the store keeps them (no Redis needed)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.folder = GoalsStore(store.root / "goals")

    def state(self, goal_id: str) -> GoalState | None:
        """The goal's state, None while it is queued for its first start."""
        return self.folder.known(goal_id).state()

    def result_markdown(self, goal_id: str) -> str:
        """`GOAL_RESULT.md`: the goal's limits and one section per iteration."""
        goal = self.folder.known(goal_id)
        try:
            return goal.result_file.read_text()
        except FileNotFoundError:
            return f"# Goal {goal_id}\n\nQueued: no worker has started it yet.\n"


class Goals(GoalFiles):
    """The fleet's goals, through one Redis connection and the store."""

    def __init__(self, redis: ArqRedis, store: Store, settings: FleetSettings) -> None:
        super().__init__(store)
        self._redis = redis
        self._settings = settings
        self._sink = EventSink(redis, store, settings.events_max, counter_rules(settings))

    async def start_file(self, spec_file: Path, tuning: str | None = None) -> GoalSummary:
        """Start the goal `spec_file` describes (`tuning` overrides the spec's)."""
        spec = load_goal_file(spec_file)
        if tuning is not None:
            spec = spec.model_copy(update={"tuning": tuning})
        return await self.start(spec)

    async def start(self, spec: GoalSpec) -> GoalSummary:
        """Record the spec and its workspace in the store and enqueue the goal. Starting a goal that
        exists (the same spec) enqueues it again only when it failed, to carry it on where it failed; a
        different spec under its id is refused."""
        tuning = None
        if spec.tuning is not None:
            tuning_store = self._store.tuning(spec.tuning)
            if not tuning_store.exists():
                raise UnknownTuningError(f"goal {spec.id}: field 'tuning': no tuning {spec.tuning!r}")
            tuning = tuning_store.config()
        limits = resolve_limits(spec, self._settings)
        spec = resolve_agents(spec, tuning).model_copy(
            update={"limits": GoalLimitsSpec(**limits.model_dump())}
        )
        goal = self.folder.goal(spec.id)
        if goal.exists():
            known = goal.spec()
            if known.model_dump(exclude={"limits"}) != spec.model_dump(exclude={"limits"}):
                raise GoalConflictError(
                    f"goal {spec.id}: a different goal with this id exists; choose another id"
                )
        else:
            await self._init_workspace(goal, spec)
            goal.write_spec(spec)
        state = goal.state()
        if state is not None and state.status == "failed":  # started again: queued in the store at once
            state = await asyncio.to_thread(self._restart_in_store, goal)
        if state is not None and state.status != "queued":
            return summary_of(state)  # running (its worker or the reconcile carries it on) or ended
        summary = GoalSummary(id=spec.id, status="queued", tuning=spec.tuning, updated_at=datetime.now(UTC))
        if await self._in_flight(spec.id):
            return summary
        await self._enqueue(spec.id, summary)
        log.info("goal_queued", goal=spec.id, tuning=spec.tuning)
        return summary

    async def _init_workspace(self, goal: GoalStore, spec: GoalSpec) -> None:
        repo = SystemRepo(goal.workspace_repo, goal.workspace_snapshots, self._settings.git_timeout_s)
        if spec.workspace is not None:
            await repo.init_from(spec.workspace)
            return
        with tempfile.TemporaryDirectory(prefix="tunefleet-empty-") as empty:
            await repo.init_from(Path(empty))

    async def _in_flight(self, goal_id: str) -> bool:
        """Whether the goal's job is in the queue or leased by a worker."""
        (is_idle,) = await idle(self._redis, self._settings.queue, [GoalJob(goal=goal_id).job_id])
        return not is_idle

    async def _enqueue(self, goal_id: str, summary: GoalSummary) -> bool:
        """Enqueue a goal that is neither queued nor running (a new one, or a failed one started again):
        its finished job's arq keys go first, or arq would refuse the id, and the losses counted against
        it (a poison goal started again after a person mended it starts afresh)."""
        job = GoalJob(goal=goal_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id), keys.losses(job.job_id))
            pipe.hset(keys.goals(), goal_id, summary.model_dump_json())
            await pipe.execute()
        queued = await self._redis.enqueue_job(GOAL_FUNCTION, job.model_dump(), _job_id=job.job_id)
        return queued is not None

    async def cancel(self, goal_id: str) -> bool:
        """Cancel a goal, durably: the cancel is in its GOAL_STATE.json when this returns, so that it
        outlives Redis. A goal no worker holds ends `cancelled` here and now; a running one is stopped by
        its worker within a poll (or ended by the next worker to take it). False when it had ended."""
        goal = self.folder.known(goal_id)
        state = goal.state()
        if state is not None and state.status in FINAL_STATUSES:
            return False
        job = GoalJob(goal=goal_id)
        leased = bool(await self._redis.exists(keys.lease(job.job_id)))
        state, ended = await asyncio.to_thread(self._cancel_in_store, goal, leased)
        if state is None:
            return False
        # Told to the workers only once it is in the store: a worker that saw it in Redis first could end
        # the goal before the store was written, and this request would find it ended (and answer 409).
        await self._redis.sadd(keys.goals_cancelled(), job.job_id)  # type: ignore[misc]
        if ended:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zrem(self._settings.queue, job.job_id)
                pipe.delete(keys.arq_job(job.job_id))
                pipe.hset(keys.goals(), goal_id, summary_of(state).model_dump_json())
                await pipe.execute()
            reason = state.completion.reason if state.completion else None
            await self._sink.emit(EventKind.GOAL_CANCELLED, state.tuning, goal=goal_id, detail=reason)
            log.info("goal_cancelled", goal=goal_id, detail=reason)
        return True

    def _restart_in_store(self, goal: GoalStore) -> GoalState | None:
        """Under the goal's lock: a failed goal queued again (`GoalState.restart`), so that its status and
        the daemon's reconcile see it queued before a worker takes it; the state as it is now."""
        with goal.locked():
            state = goal.state()
            if state is not None and state.status == "failed":
                state.restart()
                goal.write_state(state)
            return state

    def _cancel_in_store(self, goal: GoalStore, leased: bool) -> tuple[GoalState | None, bool]:
        """Under the goal's lock: end a goal that no worker holds, or write the cancel for the worker that
        holds it; the state (None: it had ended) and whether it was ended here."""
        with goal.locked():
            state = goal.state()
            if state is not None and state.status in FINAL_STATUSES:
                return None, False
            now = datetime.now(UTC)
            if state is not None and leased:
                state.cancel = CancelRequest(at=now)
                goal.write_state(state)
                return state, False
            reason = "cancelled while no worker held it"
            if state is None:
                spec = goal.spec()
                state = starting_state(spec, resolve_limits(spec, self._settings), None, None)
                reason = "cancelled before it started"
            state.finish(Completion(status="cancelled", reason=reason, at=now), worker=None)
            goal.write_state(state)
            return state, True

    async def summaries(self) -> list[GoalSummary]:
        """Every goal as Redis knows it (kept current by the workers), by id (an unreadable one left out)."""
        raw = await self._redis.hgetall(keys.goals())  # type: ignore[misc]
        found = [summary for value in raw.values() if (summary := GoalSummary.parse(value)) is not None]
        return sorted(found, key=lambda s: s.id)

    def stored_counters(self, tuning: TuningStore) -> dict[str, int]:
        """None: a goal moves no counter of a tuning's (its summary is in `tf:goals`, restored by
        `reconcile`)."""
        return {}

    async def reconcile(self) -> int:
        """Enqueue every unfinished goal with no queue entry and no lease (Redis lost it, say); put each
        goal's summary back when Redis has none. One round trip to look, whatever the number of goals;
        how many were enqueued."""
        found = await asyncio.to_thread(self._stored_states)
        if not found:
            return 0
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.goals())
            for goal_id, _ in found:
                job_id = GoalJob(goal=goal_id).job_id
                pipe.zscore(self._settings.queue, job_id)
                pipe.exists(keys.lease(job_id))
            known_raw, *replies = await pipe.execute()
        known = {name.decode(): _summary(raw) for name, raw in known_raw.items()}
        now = datetime.now(UTC)
        missing = {
            goal_id: (
                summary_of(state) if state else GoalSummary(id=goal_id, status="queued", updated_at=now)
            )
            for goal_id, state in found
            if goal_id not in known
        }
        if missing:
            mapping = {goal_id: summary.model_dump_json() for goal_id, summary in missing.items()}
            await self._redis.hset(keys.goals(), mapping=mapping)  # type: ignore[misc]
        enqueued = 0
        for (goal_id, state), queued, leased in zip(found, replies[::2], replies[1::2], strict=True):
            if (state is not None and state.status in FINAL_STATUSES) or queued is not None or leased:
                continue
            told = known.get(goal_id)
            if state is None and told is not None and told.status == "failed":
                continue  # it could not be loaded (or was poison): `goal start` takes it again once mended
            job = GoalJob(goal=goal_id)
            await self._redis.delete(keys.arq_job(job.job_id), keys.arq_result(job.job_id))
            if await self._redis.enqueue_job(GOAL_FUNCTION, job.model_dump(), _job_id=job.job_id):
                enqueued += 1
                log.info("goal_requeued", goal=goal_id, detail="reconciled: no queue entry and no lease")
        return enqueued

    def _stored_states(self) -> list[tuple[str, GoalState | None]]:
        """Every readable goal in the store with its state (None: not started); an unreadable one is
        logged and left out."""
        found: list[tuple[str, GoalState | None]] = []
        for goal in self.folder.all():
            try:
                found.append((goal.run_id, goal.state()))
            except TunefleetError as exc:
                log.error("goal_unreadable", goal=goal.run_id, error=str(exc))
        return found


def summary_of(state: GoalState) -> GoalSummary:
    current = state.current()
    completion = state.completion
    return GoalSummary(
        id=state.goal_id,
        status=state.status,
        iteration=current.iteration if current else 0,
        tuning=state.tuning,
        reason=completion.reason if completion else None,
        limit=completion.limit if completion else None,
        tokens=state.spent.tokens,
        cost_usd=state.spent.cost_usd,
        updated_at=state.updated_at,
    )


def _summary(raw: bytes) -> GoalSummary | None:
    """A goal's summary as Redis holds it; None when it cannot be read (the reconcile then goes by the
    store alone)."""
    try:
        return GoalSummary.model_validate_json(raw)
    except ValidationError:
        return None
