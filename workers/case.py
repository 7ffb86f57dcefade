"""The context one running case carries through the loop: where it is, what it holds, how it reports."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from service.core.events import EventSink
from service.core.files import write_atomic, write_model
from service.core.models.case import Case
from service.core.models.records import Phase, StepName
from service.core.models.status import RunningCase, WaitCause
from service.core.settings import FleetSettings
from service.core.store import CaseStore
from workers.breaker import BreakerGate
from workers.control import Controls
from workers.lease import CaseLease
from workers.tuning import TuningRuntime


class CaseRun:
    """One case being run by this worker under one lease."""

    def __init__(
        self,
        *,
        settings: FleetSettings,
        tuning: TuningRuntime,
        case: Case,
        store: CaseStore,
        lease: CaseLease,
        sink: EventSink,
        gate: BreakerGate,
        controls: Controls,
        worker: str,
    ) -> None:
        self.settings = settings
        self.tuning = tuning
        self.case = case
        self.store = store
        self.lease = lease
        self.sink = sink
        self.gate = gate
        self.controls = controls
        self.worker = worker
        self._where: tuple[str, str | None] | None = None
        self.log = structlog.get_logger().bind(tuning=tuning.name, case=case.id, rev=case.rev, worker=worker)

    @property
    def job_id(self) -> str:
        return self.lease.job_id

    def work_name(self, step: StepName) -> str:
        """This lease's private folder name for a step, so a stale holder's agents never collide."""
        return f"{step}-{self.lease.token}"

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
        }

    async def write(self, path: Path, model: BaseModel, *also: tuple[Path, bytes]) -> None:
        """A fenced, durable write (with `also` files, written first and not flushed): refused
        (LeaseLost) once the lease has moved on. Written on the event loop: handing the write to a
        thread costs more CPU than the flush it would take off the loop (docs/benchmarks.md)."""
        await self.lease.check()
        for other, data in also:
            write_atomic(other, data, durable=False)
        write_model(path, model)

    async def emit(self, kind: str, **fields: Any) -> None:
        where, self._where = self._where, None
        await self.sink.emit(
            kind, self.tuning.name, case=self.case.id, rev=self.case.rev, running=where, **fields
        )

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
