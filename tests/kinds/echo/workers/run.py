"""The context one echo job carries on this worker: its store, its spec and the step under way."""

from __future__ import annotations

from typing import Any, ClassVar

from service.core.models.events import EventKind
from service.core.models.records import Usage
from tests.kinds.echo.service.models import KIND_NAME, EchoJob, EchoSpec
from tests.kinds.echo.service.store import EchoStore
from workers.job_run import JobRun
from workers.lease import JobLease
from workers.runtime import WorkerRuntime


class EchoRun(JobRun):
    """One echo job run by this worker under one lease."""

    requeued: ClassVar[EventKind] = EventKind.JOB_REQUEUED

    def __init__(self, runtime: WorkerRuntime, lease: JobLease, job: EchoJob, store: EchoStore) -> None:
        super().__init__(runtime, lease, None, {"echo": job.echo, "tuning": job.tuning})
        self.job = job
        self.store = store
        self.spec: EchoSpec = store.spec()
        self.step: int | None = None
        """The step under way, if any."""
        self.spent = Usage()

    @property
    def step_under_way(self) -> str | None:
        return None if self.step is None else f"step-{self.step}"

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """Every echo event names its kind and job in `data` (service.core.models.event_data.JobTagged),
        in its tuning's stream and counters."""
        data = {**fields.pop("data", {}), "kind": KIND_NAME, "job": self.job.echo}
        await self.sink.emit(kind, self.job.tuning, data=data, **fields)

    def unfinished_spend(self, spent: Usage, where: dict[str, Any]) -> None:
        self.spent = self.spent + spent  # an echo step calls no agent: nothing reaches here

    async def settle_spend(self) -> None:
        return None
