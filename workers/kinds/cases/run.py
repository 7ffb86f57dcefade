"""The context one running case carries through the loop: where it is, what it holds, how it reports."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import structlog

from service.core.events import QueuedEvent
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.records import Handback, Phase, Spend, StepName, Usage
from service.core.models.status import RunningCase, WaitCause
from service.core.store import CaseStore
from workers.job_run import JobRun
from workers.lease import JobLease, RunView
from workers.runtime import WorkerRuntime
from workers.spend import check_case_budget, note_spend
from workers.tuning import TuningRuntime

UNFINISHED = "the step was cut short"
START_VIEW_FRESH_S = 0.25
"""How old the run view read with the lease may be when the case's first run start takes it for its own
read (a first load of the tuning on this worker may take longer: the run start then asks again)."""


class CaseRun(JobRun):
    """One case being run by this worker under one lease."""

    requeued: ClassVar[EventKind] = EventKind.CASE_REQUEUED
    shown_running: ClassVar[bool] = True
    """Whether the job is one of its tuning's running cases (in the running hash, so in status and the
    dashboard); else `at` notes where it is for its log lines only."""

    def __init__(
        self, runtime: WorkerRuntime, lease: JobLease, tuning: TuningRuntime, case: Case, store: CaseStore
    ) -> None:
        super().__init__(runtime, lease, tuning, {"tuning": tuning.name, "case": case.id, "rev": case.rev})
        self.tuning: TuningRuntime = tuning
        self.case = case
        self.store = store
        self._where: tuple[str, str | None] | None = None
        self._unsettled: list[tuple[dict[str, Any], Usage]] = []
        self._soon: list[QueuedEvent] = []
        self.start_view: RunView | None = None
        """The tuning's run view read with the lease (workers.lease.RunView), until a step starts or the
        case waits for the fleet (`at`): the first run start takes it for its own read (`take_start_view`)."""

    def where(self, phase: Phase, attempt: int, step: StepName) -> dict[str, Any]:
        """The fields every step request shares (workers.adapters.base.StepRequest): the step's own
        folder for this attempt and this lease, and its log there."""
        paths = self.store.attempt(phase, attempt)
        step_dir = paths.root / self.work_name(step)
        return {
            "tuning": self.tuning.name,
            "case_id": self.case.id,
            "phase": phase,
            "attempt": attempt,
            "attempt_dir": paths.root,
            "step_dir": step_dir,
            "log_file": step_dir / f"{step}.log",
            "demo": self.case.demo,
            "rev": self.case.rev,
        }

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """Send an event, after the events `emit_soon` queued before it."""
        self._soon.append(self.queue_event(kind, **fields))
        await self.events_sent()

    async def events_sent(self) -> None:
        """Wait for the events queued so far, in order; the first error ends the wait (the events after
        it are still sent, and no longer waited for)."""
        while self._soon:
            queued = self._soon.pop(0)
            try:
                await queued.sent()
            except BaseException:
                self.abandon_events()
                raise

    def abandon_events(self) -> None:
        for queued in self._soon:
            queued.abandon()
        self._soon = []

    def emit_soon(self, kind: EventKind, **fields: Any) -> None:
        """Queue an event without waiting for Redis: the case's next event waits for it (and, queued in
        the same loop turn, shares its round trip). For events that fence nothing and that the case's
        next event soon follows: `case_started`, a step's `step_started` (the agent starts while it
        leaves; the record's write checks the lease; an apply's leaves while it holds the lock) and
        `step_finished` (its record is on disk already), `memory_submitted` (the memory is kept)."""
        self._soon.append(self.queue_event(kind, **fields))

    def queue_event(self, kind: EventKind, **fields: Any) -> QueuedEvent:
        where, self._where = self._where, None
        return self.sink.queue(
            kind, self.tuning.name, case=self.case.id, rev=self.case.rev, running=where, **fields
        )

    async def let_go(self, kind: EventKind, detail: str, data: dict[str, Any] | None = None) -> None:
        self.at(None)  # leaves the running hash with the event
        await super().let_go(kind, detail, data)

    async def run_version(self) -> str:
        """The version a run of this case works on: the tuning's current one."""
        return await self.tuning.current_version()

    def take_start_view(self) -> RunView | None:
        """The run view read with the lease, once, if it stands for a read made now: no step has started
        and the case has not waited since, and it is at most START_VIEW_FRESH_S old."""
        view, self.start_view = self.start_view, None
        if view is None or time.monotonic() - view.read_at_s > START_VIEW_FRESH_S:
            return None
        return view

    @property
    def waits_for_applies(self) -> bool:
        """Whether a run start waits for the applies pending (`wait_for_apply`): they change the
        version it runs."""
        return self.settings.wait_for_apply

    async def check_budget(self) -> None:
        """OverBudget when the case has spent its budget (workers.spend), its records landed first."""
        budget = self.tuning.config.budget
        if not budget.bounds_case:  # a step without one costs nothing here, not even a read of the records
            return
        await self.landed()
        check_case_budget(self.store, budget)

    async def wind_down(self) -> None:
        """The job starts no agent any more; what is left is recording its end. Its slot is given up at
        once, so that the next job is claimed and starts meanwhile, and its last records land behind those
        starts and the other jobs' steps (workers.slots). A tuning bounded by its budget first has the last
        step's spend in its counters, before the next job checks them. Every kind that runs the case loop's
        steps ends through here (a case, an evaluation item)."""
        if self.tuning.config.budget.bounds_tuning:
            await self.landed()
            await self.events_sent()
        self.runtime.slots.give_up(self.job_id)
        await self.runtime.slots.turn(after_records=True)
        await self.landed()

    def note_spend(self, phase: Phase, attempt: int, step: StepName, usage: Usage, why: str) -> bool:
        """Usage that no record will keep, into the case's ledger at once (no await); False if none."""
        spend = Spend(phase=phase, attempt=attempt, step=step, usage=usage, why=why)
        return note_spend(self.store.root, spend)

    async def record_spend(self, phase: Phase, attempt: int, step: StepName, usage: Usage, why: str) -> None:
        """`note_spend`, and its `spend_recorded` event, which adds it to the tuning's tokens and cost."""
        if self.note_spend(phase, attempt, step, usage, why):
            await self._announce_spend(phase, attempt, step, usage, why)

    async def _announce_spend(
        self, phase: Phase, attempt: int, step: StepName, usage: Usage, why: str
    ) -> None:
        await self.step_event(EventKind.SPEND_RECORDED, (phase, attempt, step), usage, detail=why)

    async def step_event(
        self, kind: EventKind, where: tuple[Phase, int, StepName], usage: Usage, **fields: Any
    ) -> None:
        """An event of one of the case's steps that spent `usage` (`step_finished`, `spend_recorded`):
        where it is (phase, attempt, step), and what it spent, for the tuning's counters."""
        await self.emit(kind, **self._step_fields(where, usage), **fields)

    def step_finished_soon(self, where: tuple[Phase, int, StepName], usage: Usage, **fields: Any) -> None:
        """The step's `step_finished` (a `step_event`), by `emit_soon`: its record is written."""
        self.emit_soon(EventKind.STEP_FINISHED, **self._step_fields(where, usage), **fields)

    @staticmethod
    def _step_fields(where: tuple[Phase, int, StepName], usage: Usage) -> dict[str, Any]:
        phase, attempt, step = where
        return {"step": step, "phase": phase, "attempt": attempt, **usage.event_counts()}

    def unfinished_spend(self, spent: Usage, where: dict[str, Any]) -> None:
        """Into the case's ledger at once: it counts in the case's spend from now on."""
        if self.note_spend(where["phase"], where["attempt"], where["step"], spent, UNFINISHED):
            self._unsettled.append((where, spent))

    def note_handback(self, count: int, error: str) -> None:
        """Into the case's `handbacks.jsonl`, with what the step cut short had spent (`show` and the
        case's result count them)."""
        spent = sum((usage for _, usage in self._unsettled), Usage())
        self.store.add_handback(Handback(count=count, error=error, usage=spent))

    async def settle_spend(self) -> None:
        """The `spend_recorded` events of the ledger lines noted since, which move the tuning's totals."""
        while self._unsettled:
            where, spent = self._unsettled.pop()
            await self._announce_spend(where["phase"], where["attempt"], where["step"], spent, UNFINISHED)

    def at(
        self,
        step: StepName | None,
        phase: Phase | None = None,
        attempt: int | None = None,
        *,
        waiting: WaitCause | None = None,
        fence: int | None = None,
    ) -> None:
        """Note where the case is now (None: it left this worker): at `step`, or waiting to start it
        (`waiting`: what for), holding the improvements lock (`fence`) if it does; status and the
        dashboard see it with the next event, in the same round trip."""
        structlog.contextvars.bind_contextvars(phase=phase, attempt=attempt, step=step)
        self.start_view = None  # a step starts, or the case waits: the view read with the lease is past
        if waiting is not None:  # it starts no agent until the fleet lets it
            self.runtime.slots.starting(self.job_id, False)
        if not self.shown_running:
            return
        state = None
        if step is not None and phase is not None and attempt is not None:
            state = RunningCase(
                case=self.case.id,
                rev=self.case.rev,
                worker=self.worker,
                step=step,
                phase=phase,
                attempt=attempt,
                since=datetime.now(UTC),
                work=self.work_name(step),
                waiting=waiting,
                fence=fence,
            ).model_dump_json(exclude_none=True)
        self._where = (self.job_id, state)
