"""The context one evaluation item carries on this worker: a case run (workers.case.CaseRun) whose store
is the item's folder (service.evals.store.ItemStore, a case folder with one try), whose run works on the
evaluation's fixed version and never waits for an apply, and whose events carry the evaluation
(`data.eval`, `data.repeat`: they move its counters, never the cases') and never enter the tuning's
running cases."""

from __future__ import annotations

from typing import Any, ClassVar

from service.core.events import QueuedEvent
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.evals.store import ItemStore
from workers.case import CaseRun
from workers.lease import CaseLease
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
        lease: CaseLease,
        tuning: TuningRuntime,
        case: Case,
        item: ItemStore,
        eval_id: str,
        version: str,
    ) -> None:
        super().__init__(runtime, lease, tuning, case, item)
        self.item = item
        self.eval_id = eval_id
        self.version = version
        """The evaluation's commit: every run of the item works on it."""
        self.log = self.log.bind(eval=eval_id, repeat=item.repeat)

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
