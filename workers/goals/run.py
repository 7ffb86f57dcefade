"""The context one goal carries through its loop on this worker: its store, state, lease and agents,
and how it records a change (fenced, in the store, then in Redis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from service.core import keys
from service.core.models.goal import GoalSpec, GoalStep
from service.core.models.goal_state import GoalState, IterationState, TraceEvent
from service.core.settings import FleetSettings
from service.core.system import SystemRepo
from service.goals.fleet import summary_of
from service.goals.store import GoalStore
from workers.adapters.goal_base import GoalAgent
from workers.breaker import BreakerGate
from workers.control import Controls
from workers.lease import CaseLease
from workers.runtime import WorkerRuntime

log = structlog.get_logger()


class GoalRun:
    """One goal being pursued by this worker under one lease."""

    def __init__(
        self,
        *,
        runtime: WorkerRuntime,
        store: GoalStore,
        spec: GoalSpec,
        state: GoalState,
        lease: CaseLease,
        planner: GoalAgent,
        worker_agent: GoalAgent,
        system_dir: Path,
    ) -> None:
        self.settings: FleetSettings = runtime.settings
        self.runtime = runtime
        self.store = store
        self.spec = spec
        self.state = state
        self.lease = lease
        self.planner = planner
        self.worker_agent = worker_agent
        self.system_dir = system_dir
        self.controls: Controls = runtime.controls
        self.gate: BreakerGate = runtime.gate
        self.worker = runtime.name
        self.workspace = SystemRepo(
            store.workspace_repo, store.workspace_snapshots, self.settings.git_timeout_s
        )
        self.step: GoalStep | None = None
        self.step_deadline = 0.0
        """The event loop's time at which the step under way is ended (set by the loop)."""
        self._sent = len(state.trace)
        """Trace events already in the stream (those of earlier holders are not sent again)."""
        self.log = structlog.get_logger().bind(goal=spec.id, worker=self.worker)

    @property
    def job_id(self) -> str:
        return self.lease.job_id

    def agent_for(self, step: GoalStep) -> GoalAgent:
        return self.worker_agent if step == "work" else self.planner

    def step_dir(self, iteration: int, step: GoalStep) -> Path:
        """This lease's own folder for a step, so that a stale holder's agents never collide."""
        return self.store.iteration_dir(iteration) / f"{step}-{self.lease.token}"

    def event(
        self,
        kind: str,
        iteration: IterationState | None = None,
        step: GoalStep | None = None,
        detail: str | None = None,
        **data: Any,
    ) -> None:
        """Add an event to the state's trace (written with the next `persist`)."""
        self.state.trace.append(
            TraceEvent(
                seq=len(self.state.trace) + 1,
                at=datetime.now(UTC),
                kind=kind,
                iteration=iteration.iteration if iteration else None,
                step=step,
                detail=detail,
                worker=self.worker,
                data=data,
            )
        )

    async def persist(self) -> None:
        """Write the state (fenced: refused once the lease moved on), then show it in Redis: the
        goal's summary and the trace events this holder has not sent yet."""
        now = datetime.now(UTC)
        self.state.updated_at = now
        current = self.state.current()
        if current is not None:
            current.updated_at = now
        await self.lease.check()
        self.store.save(self.state)
        summary = summary_of(self.state).model_copy(
            update={"step": self.step, "worker": None if self.step is None else self.worker}
        )
        new = self.state.trace[self._sent :]
        async with self.runtime.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.goals(), self.spec.id, summary.model_dump_json())
            for event in new:
                line = json.dumps(
                    {
                        "at": event.at.isoformat(),
                        "kind": event.kind,
                        "tuning": self.state.tuning or "",
                        "goal": self.spec.id,
                        "worker": self.worker,
                        "detail": event.detail,
                        "data": {"iteration": event.iteration, "step": event.step, **event.data},
                    }
                )
                pipe.xadd(keys.events(), {"event": line}, maxlen=self.settings.events_max, approximate=True)
            await pipe.execute()
        self._sent = len(self.state.trace)
        for event in new:
            self.log.info(event.kind, iteration=event.iteration, step=event.step, detail=event.detail)
