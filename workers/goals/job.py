"""The arq job function of a goal: under a lease, like a case (workers.jobs), to its end or until the
worker lets it go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import ConfigError, TunefleetError
from service.core.models.goal import FINAL_STATUSES, GoalSpec
from service.core.models.goal_state import GoalState, GoalSummary
from service.core.models.jobs import GoalJob
from service.core.models.tuning import CommandAdapter, DemoAdapter, LlmAdapter
from service.core.system import SystemRepo
from service.goals.spec import resolve_limits
from service.goals.store import GoalStore
from workers.adapters.goal_base import GoalAgent
from workers.adapters.goal_command import CommandGoalAgent
from workers.adapters.goal_demo import DemoGoalAgent
from workers.adapters.llm.goal import LlmGoalAgent
from workers.adapters.llm.provider import Providers
from workers.adapters.process import AgentHost
from workers.errors import KeyRefused, LeaseLost, ProviderDown
from workers.goals.loop import end, pursue
from workers.goals.run import GoalRun
from workers.goals.steps import GoalVoidsExhausted
from workers.lease import CaseLease
from workers.runtime import WorkerRuntime
from workers.tasks import hand_back, quietly, watched

log = structlog.get_logger()


async def run_goal(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Pursue one goal; the returned dict is arq's job result (JSON)."""
    runtime: WorkerRuntime = ctx["runtime"]
    job = GoalJob.model_validate(payload)
    lease, grant = await runtime.acquire(job.job_id, keys.GOALS_SCOPE)
    structlog.contextvars.bind_contextvars(goal=job.goal, worker=runtime.name)
    try:
        gr = await goal_run(runtime, job, lease)
    except (TunefleetError, OSError) as exc:
        reason = f"the goal could not be loaded: {exc}"
        log.error("goal_unreadable", error=str(exc))
        summary = GoalSummary(id=job.goal, status="failed", reason=reason, updated_at=datetime.now(UTC))
        await quietly(runtime.redis.hset(keys.goals(), job.goal, summary.model_dump_json()))  # type: ignore[arg-type]
        return {"status": "failed", "reason": reason}
    try:
        if grant.cancelled:
            await end(gr, "cancelled", "cancelled before a worker took it")
        elif grant.lost >= runtime.settings.max_lease_losses:
            await end(gr, "failed", f"poison: the goal lost its lease {grant.lost} times")
        else:
            async with watched(lease.heartbeat()):
                await pursue(gr)
    except LeaseLost as exc:
        log.warning("lease_lost", error=str(exc))
        return {"lease_lost": lease.token}
    except RedisError as exc:
        log.warning("redis_lost_mid_goal", error=str(exc))
        await hand_back(lease, runtime.settings.poll_delay_s)
    except (ProviderDown, KeyRefused) as exc:
        log.warning("goal_provider_down", error=str(exc))
        await hand_back(lease, runtime.settings.provider_retry_s, runtime.settings.provider_retry_s)
    except GoalVoidsExhausted as exc:
        await end(gr, "failed", str(exc))
    except asyncio.CancelledError:
        if job.job_id not in runtime.controls.cancelling:
            await asyncio.shield(quietly(lease.requeue()))  # the worker is stopping: hand the goal back
            raise
        runtime.controls.cancelling.discard(job.job_id)
        where = f" during the {gr.step} step" if gr.step else ""
        await asyncio.shield(end(gr, "cancelled", f"cancelled by the user{where}"))
    except Exception as exc:
        log.exception("goal_crashed")
        await end(gr, "failed", f"internal error: {type(exc).__name__}: {exc}")
    completion = gr.state.completion
    return {"status": gr.state.status, "reason": completion.reason if completion else None}


async def goal_run(runtime: WorkerRuntime, job: GoalJob, lease: CaseLease) -> GoalRun:
    """The goal's run on this worker: its spec and state (made at its first start), agents and system."""
    store = GoalStore(runtime.store.root / "goals" / job.goal)
    spec = store.spec()
    state = store.state()
    system_dir = store.root / "no-system"
    version = None
    if spec.tuning is not None:
        tuning = runtime.tuning(spec.tuning)
        version = await tuning.current_version()
        system_dir = await tuning.repo.snapshot(version)
    else:
        system_dir.mkdir(parents=True, exist_ok=True)
    host = runtime.host
    gr = GoalRun(
        runtime=runtime,
        store=store,
        spec=spec,
        state=state or await _first_state(runtime, store, spec, version),
        lease=lease,
        planner=build_goal_agent(spec.analyzer, host, "analyzer", runtime.llm),
        worker_agent=build_goal_agent(spec.runner, host, "runner", runtime.llm),
        system_dir=system_dir,
    )
    if state is None:
        gr.event("goal_started", None, None, spec.goal)
    elif state.status not in FINAL_STATUSES or state.status == "failed":
        if state.status == "failed":  # started again: it goes on where it failed, voids counted afresh
            state.status, state.completion = "running", None
            current = state.current()
            if current is not None:
                current.completion, current.voids_counted = None, dict(current.voids)
        gr.event("goal_resumed", state.current(), None, f"taken by {runtime.name}")
    return gr


async def _first_state(
    runtime: WorkerRuntime, store: GoalStore, spec: GoalSpec, version: str | None
) -> GoalState:
    now = datetime.now(UTC)
    limits = resolve_limits(spec, runtime.settings)
    workspace = SystemRepo(store.workspace_repo, store.workspace_snapshots, runtime.settings.git_timeout_s)
    return GoalState(
        goal_id=spec.id,
        goal=spec.goal,
        status="running",
        limits=limits,
        tuning=spec.tuning,
        version=version,
        workspace=await workspace.head(),
        started_at=now,
        updated_at=now,
        deadline_at=now + timedelta(seconds=limits.timeout_s),
    )


def build_goal_agent(config: object, host: AgentHost, role: str, llm: Providers | None = None) -> GoalAgent:
    """The agent that takes a role's goal steps (ConfigError for a kind that has none); `llm`: the
    worker's LLM providers (clients, fleet-wide limits, formats)."""
    if config is None or isinstance(config, DemoAdapter):
        return DemoGoalAgent()
    if isinstance(config, CommandAdapter):
        return CommandGoalAgent(config, host, role)
    if isinstance(config, LlmAdapter):
        return LlmGoalAgent(config, llm)
    raise ConfigError(f"{role}: the {getattr(config, 'kind', '?')} kind takes no goal steps")
