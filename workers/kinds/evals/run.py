"""The context one evaluation item carries on this worker: a case run (workers.kinds.cases.run.CaseRun)
whose store
is the item's folder (service.kinds.evals.store.ItemStore, a case folder with one try), whose run works on the
evaluation's fixed version and never waits for an apply, and whose events carry the evaluation
(`data.eval`, `data.repeat`: they move its counters, never the cases') and never enter the tuning's
running cases."""

from __future__ import annotations

from typing import Any, ClassVar

from service.core.events import QueuedEvent
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.records import Phase, StepName
from service.kinds.evals.store import ItemStore
from workers.kinds.cases.run import CaseRun
from workers.lease import JobLease
from workers.runtime import WorkerRuntime
from workers.tuning import TuningRuntime


class ItemRun(CaseRun):
    """One item (case, repeat) of an evaluation run by this worker under one lease."""

    requeued: ClassVar[EventKind] = EventKind.EVAL_ITEM_REQUEUED
    shown_running: ClassVar[bool] = False
    """An item is not one of the tuning's running cases: status shows an evaluation's progress from its
    counters."""

    def __init__(
        self,
        runtime: WorkerRuntime,
        lease: JobLease,
        tuning: TuningRuntime,
        case: Case,
        item: ItemStore,
        eval_id: str,
        version: str,
        draws_apart: bool = False,
    ) -> None:
        super().__init__(runtime, lease, tuning, case, item)
        self.item = item
        self.eval_id = eval_id
        self.version = version
        """The evaluation's commit: every run of the item works on it."""
        self.draws_apart = draws_apart
        """Whether the demo agents' draws are keyed by the evaluation too (a gate's rounds)."""
        self.log = self.log.bind(eval=eval_id, repeat=item.repeat)

    def where(self, phase: Phase, attempt: int, step: StepName) -> dict[str, Any]:
        """A case's step fields, with the item's repeat (so that the demo agents draw afresh per repeat),
        and for a gate's evaluation its id (so that each round draws afresh)."""
        evaluation = self.eval_id if self.draws_apart else None
        return {**super().where(phase, attempt, step), "repeat": self.item.repeat, "evaluation": evaluation}

    async def run_version(self) -> str:
        return self.version

    @property
    def waits_for_applies(self) -> bool:
        return False  # its version is fixed: no apply changes what it runs

    def queue_event(self, kind: EventKind, **fields: Any) -> QueuedEvent:
        """An item's events carry its evaluation and repeat, and never touch the running hash."""
        data = {**fields.pop("data", {}), "eval": self.eval_id, "repeat": self.item.repeat}
        return self.sink.queue(
            kind, self.tuning.name, case=self.case.id, rev=self.case.rev, data=data, **fields
        )
