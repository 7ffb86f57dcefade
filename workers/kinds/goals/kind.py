"""Goals as a kind of leased job (workers.envelope): how one is loaded, pursued (the goal loop,
workers.kinds.goals.loop) and ended."""

from __future__ import annotations

from datetime import UTC, datetime

from service.core import keys
from service.core.errors import TunefleetError
from service.core.models.events import EventKind
from service.core.models.jobs import GOAL_FUNCTION, GoalJob, JobResult
from service.core.system import SystemRepo
from service.kinds.goals.models import FINAL_STATUSES
from service.kinds.goals.spec import resolve_limits
from service.kinds.goals.state import GoalState, GoalSummary
from service.kinds.goals.store import GoalStore, starting_state
from workers.adapters.factory import build_goal_agent, llm_modules_present, llm_roles
from workers.envelope import Ending, JobKind
from workers.kinds.goals.loop import end, pursue
from workers.kinds.goals.run import GoalRun, under_goal_lock
from workers.lease import Grant, JobLease
from workers.runtime import WorkerRuntime
from workers.tasks import quietly


def result_of(state: GoalState) -> JobResult:
    completion = state.completion
    return JobResult(state=completion.status, reason=completion.reason) if completion else JobResult()


class GoalKind(JobKind[GoalJob, GoalRun]):
    """One goal, from its first missing step to its completion."""

    function, noun, payload = GOAL_FUNCTION, "goal", GoalJob

    async def prepare(self, runtime: WorkerRuntime, job: GoalJob) -> None:
        if llm_modules_present():
            return
        try:
            spec = GoalStore(runtime.store.root / "goals" / job.goal).spec()
        except (OSError, TunefleetError, ValueError):
            return  # the load names it
        tuning_models = runtime.tuning_models(spec.tuning) if spec.tuning is not None else []
        await runtime.models_ready(llm_roles((spec.runner, spec.analyzer)) + tuning_models)

    async def load(
        self, runtime: WorkerRuntime, job: GoalJob, lease: JobLease, grant: Grant, job_try: int
    ) -> GoalRun:
        """The goal's run on this worker: its spec and state (made at its first start), agents and system,
        its start (or its resumption) announced."""
        store = GoalStore(runtime.store.root / "goals" / job.goal)
        spec = store.spec()
        state = store.state()
        tuning = runtime.tuning(spec.tuning) if spec.tuning is not None else None
        system_dir = store.root / "no-system"
        version = None
        if tuning is not None:
            version = await tuning.current_version()
            system_dir = await tuning.repo.snapshot(version)
        else:
            system_dir.mkdir(parents=True, exist_ok=True)
        first = state is None
        if state is None:
            workspace = SystemRepo(
                store.workspace_repo, store.workspace_snapshots, runtime.settings.git_timeout_s
            )
            made = starting_state(
                spec, resolve_limits(spec, runtime.settings), version, await workspace.head()
            )
            # a cancel written meanwhile holds
            state = await under_goal_lock(runtime, store.create, made, runtime.settings.goal_lock_wait_s)
            first = state is made
        goal_run = GoalRun(
            runtime,
            lease,
            tuning,
            store=store,
            spec=spec,
            state=state,
            planner=build_goal_agent(spec.analyzer, runtime.host, "analyzer", runtime.llm),
            worker_agent=build_goal_agent(spec.runner, runtime.host, "runner", runtime.llm),
            system_dir=system_dir,
        )
        if first:
            goal_run.event(EventKind.GOAL_STARTED, None, None, spec.goal)
        elif state.status not in FINAL_STATUSES or state.status == "failed":
            if state.status == "failed":  # started again by a client older than GoalState.restart
                state.restart()
            state.status = "running"  # queued (a failed goal started again), or taken over
            goal_run.event(EventKind.GOAL_RESUMED, state.current(), None, f"taken by {runtime.name}")
        else:
            return goal_run  # ended (a cancel before any worker took it): nothing to write
        await goal_run.persist()
        return goal_run

    async def unloadable(
        self, runtime: WorkerRuntime, job: GoalJob, lease: JobLease, state: Ending, reason: str
    ) -> JobResult:
        """The spec or the state cannot be read: say so in the goal's summary (the files stay as they are,
        for a person to mend and start the goal again)."""
        summary = GoalSummary(id=job.goal, status=state, reason=reason, updated_at=datetime.now(UTC))
        await quietly(runtime.redis.hset(keys.goals(), job.goal, summary.model_dump_json()))  # type: ignore[arg-type]
        return JobResult(state=state, reason=reason)

    async def pursue(self, run: GoalRun) -> JobResult:
        return result_of(await pursue(run))

    async def end(self, run: GoalRun, state: Ending, reason: str) -> JobResult:
        if run.state.status not in FINAL_STATUSES:
            await end(run, state, reason)
        return result_of(run.state)


KIND = GoalKind()
"""The kind as the worker runs it (workers.jobs)."""
