"""The context one goal carries through its loop on this worker: its store, state, agents and system,
and how it records a change (fenced, in the store, then in Redis and the fleet's events)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, ParamSpec, TypeVar

from redis.exceptions import RedisError

from service.core import keys
from service.core.models.events import EventKind
from service.core.models.records import Usage
from service.core.system import SystemRepo
from service.kinds.goals.errors import GoalBusyError
from service.kinds.goals.fleet import summary_of
from service.kinds.goals.models import GoalSpec, GoalStep
from service.kinds.goals.state import GoalSpend, GoalState, IterationState, TraceEvent
from service.kinds.goals.store import GoalStore
from workers.adapters.goal_base import GoalAgent
from workers.errors import FilesBusy, LeaseLost
from workers.job_run import JobRun
from workers.lease import JobLease
from workers.runtime import WorkerRuntime
from workers.tasks import whole_in_thread
from workers.tuning import TuningRuntime

T = TypeVar("T")
P = ParamSpec("P")

STEP_OF: dict[str, GoalStep] = {"planning": "plan", "working": "work", "reviewing": "review"}
"""The step an iteration in this status is at (or, after a hand-back, was at)."""


async def under_goal_lock(
    runtime: WorkerRuntime, write: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """A write of the goal's state, which waits for the goal's lock, in one of the worker's lock-wait
    threads: its other jobs go on while another process holds the lock (a `cancel`, or a frozen holder).
    A lock held past its wait is FilesBusy: the goal is handed back for later (workers.envelope), not
    failed."""
    try:
        return await whole_in_thread(runtime.lock_waits, write, *args, **kwargs)
    except GoalBusyError as exc:
        raise FilesBusy(str(exc)) from None


class GoalRun(JobRun):
    """One goal being pursued by this worker under one lease."""

    requeued: ClassVar[EventKind] = EventKind.GOAL_REQUEUED

    def __init__(
        self,
        runtime: WorkerRuntime,
        lease: JobLease,
        tuning: TuningRuntime | None,
        *,
        store: GoalStore,
        spec: GoalSpec,
        state: GoalState,
        planner: GoalAgent,
        worker_agent: GoalAgent,
        system_dir: Path,
    ) -> None:
        super().__init__(runtime, lease, tuning, {"goal": spec.id})
        self.store = store
        self.spec = spec
        self.state = state
        self.planner = planner
        self.worker_agent = worker_agent
        self.system_dir = system_dir
        self.workspace = SystemRepo(
            store.workspace_repo, store.workspace_snapshots, self.settings.git_timeout_s
        )
        self.step: GoalStep | None = None
        self.step_deadline = 0.0
        """The event loop's time at which the step under way is ended (set by the loop)."""
        self.step_spent = Usage()
        """What the step under way's agent calls spent (set to nothing by the loop as it starts)."""
        self.step_ran = False
        """Whether an agent call returned under this lease: until one has, a write clears no suspicion
        (the goal has not shown yet that it does not take its worker down; workers.lease)."""
        self._sent = len(state.trace)
        """Trace events already in the stream (those of earlier holders are not sent again)."""
        self._unsaved: list[GoalSpend] = []
        """What agent calls spent since the last state write (in `state` already): into the ledger when
        the next write is refused (a busy lock, a lost lease, Redis gone), for the next holder to record."""

    @property
    def cancel_requested(self) -> bool:
        return self.state.cancel is not None

    @property
    def step_under_way(self) -> str | None:
        """The step running now; before this holder starts one, the step the goal's current iteration
        was at under the previous holder (None for a goal that never began a step)."""
        if self.step is not None:
            return self.step
        current = self.state.current()
        return STEP_OF.get(current.status) if current is not None else None

    def agent_for(self, step: GoalStep) -> GoalAgent:
        return self.worker_agent if step == "work" else self.planner

    def add_spend(self, it: IterationState, step: GoalStep, usage: Usage) -> None:
        """Count what an agent call of `step` spent in the iteration and the goal (written with the next
        `persist`)."""
        it.spent = it.spent + usage
        self.state.spent = self.state.spent + usage
        self._unsaved.append(GoalSpend(iteration=it.iteration, step=step, usage=usage))

    def step_dir(self, iteration: int, step: GoalStep) -> Path:
        """This lease's own folder for a step, so that a stale holder's agents never collide."""
        return self.store.iteration_dir(iteration) / self.work_name(step)

    def event(
        self,
        kind: EventKind,
        iteration: IterationState | None = None,
        step: GoalStep | None = None,
        detail: str | None = None,
        **fields: Any,
    ) -> TraceEvent:
        """Add an event to the state's trace (written with the next `persist`)."""
        number = iteration.iteration if iteration else None
        return self.state.record(kind, self.worker, number, step, detail, **fields)

    async def persist(self) -> None:
        """Write the state (fenced: refused once the lease moved on), with the spend of the ledger folded
        in; then show it: the goal's summary, and the trace events this holder has not sent yet."""
        self._fold_ledger()
        now = datetime.now(UTC)
        self.state.updated_at = now
        current = self.state.current()
        if current is not None:
            current.updated_at = now
        try:
            await self.lease.check(clears=self.step_ran)
            await under_goal_lock(self.runtime, self._save)
        except (LeaseLost, RedisError, FilesBusy):  # nothing written: what it spent goes to the ledger
            for spend in self._unsaved:
                self.store.note_spend(spend)
            self._unsaved = []
            raise
        new = self.state.trace[self._sent :]
        await asyncio.gather(self._show(self.step), *(self._send(event) for event in new))  # one round trip
        self._sent += len(new)

    def _save(self) -> None:
        """The state's write (in a lock-wait thread): its spends are recorded once it is, even if the
        caller was cancelled meanwhile."""
        self.store.save(self.state, self.settings.goal_lock_wait_s)
        self._unsaved = []

    async def _show(self, step: GoalStep | None) -> None:
        summary = summary_of(self.state).model_copy(
            update={"step": step, "worker": None if step is None else self.worker}
        )
        await self.runtime.batch.command("HSET", keys.goals(), self.spec.id, summary.model_dump_json())

    async def _send(self, event: TraceEvent) -> None:
        spent = event.spent or Usage()
        await self.sink.emit(
            event.kind,
            self.state.tuning,
            goal=self.spec.id,
            iteration=event.iteration,
            step=event.step,
            detail=event.detail,
            duration_ms=event.duration_ms,
            tokens=spent.tokens or None,
            unmeasured_tokens=spent.unmeasured_tokens or None,
            cost_usd=spent.cost_usd or None,
            data=event.data,
        )

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """An event of the fleet's (a hand-back, a lost lease) that is no change of the goal's state."""
        await self.sink.emit(kind, self.state.tuning, goal=self.spec.id, **fields)

    async def let_go(self, kind: EventKind, detail: str, data: dict[str, Any] | None = None) -> None:
        await self._show(None)
        await super().let_go(kind, detail, data)

    def unfinished_spend(self, spent: Usage, where: dict[str, Any]) -> None:
        """Into the goal's ledger at once: the next state write (this holder's or the next one's) adds it."""
        spend = GoalSpend(iteration=where["iteration"], step=where["step"], usage=spent)
        self.store.note_spend(spend)

    async def settle_spend(self) -> None:
        """Write the state with what its steps spent (measured, or in the ledger) while the lease holds."""
        await self.persist()

    def _fold_ledger(self) -> None:
        """Add the ledger's new spends to the goal's and their iterations' `spent`, each with its event."""
        spends, lines = self.store.spends(self.state.spent_lines)
        for spend in spends:
            self.state.spent = self.state.spent + spend.usage
            for it in self.state.iterations:
                if it.iteration == spend.iteration:
                    it.spent = it.spent + spend.usage
            detail = f"the {spend.step} step was cut short"
            self.state.record(
                EventKind.SPEND_RECORDED, self.worker, spend.iteration, spend.step, detail, spent=spend.usage
            )
        self.state.spent_lines = lines
