"""The live counters a case's events move in its tuning's counters hash (`tf:stats:<tuning>`), so that
status reads the cases' progress without a store scan. Runs are counted when their fate is known:
`runs:ran` when the analyzer grades one (not void), `runs:void` when one is set aside (voided by the
runner or by the analyzer), so that they add up to the runs the store keeps
(`stored_runs`)."""

from __future__ import annotations

from service.core.errors import StoreError
from service.core.io.files import read_model
from service.core.models.event_types import StepFinishedEvent
from service.core.models.events import CASE_ENDS, EvalTagged, Event, EventKind
from service.core.models.records import Feedback
from service.core.store import PHASES, CaseStore

STATE_OF_END = {kind: state for state, kind in CASE_ENDS.items()}


def case_counter_moves(event: Event) -> dict[str, int] | None:
    """The counters a case's event moves; None for an event that is not a case's (an evaluation item's
    steps look like a case's, but carry `data.eval`)."""
    if isinstance(event.data, EvalTagged) and event.data.eval is not None:
        return None
    if event.kind in STATE_OF_END:
        return {"state:" + STATE_OF_END[event.kind]: 1}
    if event.kind is EventKind.CASE_QUEUED:
        return {"queued": 1}
    if event.kind is EventKind.CASE_REQUEUED:
        return {"requeued": 1}
    if isinstance(event, StepFinishedEvent) and event.case is not None and event.step is not None:
        moves = {f"steps:{event.step}": 1}
        if event.step == "analyze" and event.data.outcome != "void":
            moves["runs:ran"] = 1  # a run is counted once its fate is known: graded, or set aside
        return moves
    if event.kind is EventKind.ATTEMPT_SET_ASIDE:
        return {"runs:void": 1}
    return None


def stored_runs(case_store: CaseStore) -> dict[str, int]:
    """The agent runs of a case revision as its folder keeps them, as `runs:<outcome>` counters (what
    case_counter_moves counted live): `ran`, the tries whose run was graded (not void);
    `void`, the runs set aside."""
    ran = void = 0
    for phase in PHASES:
        folder = case_store.root / phase
        if folder.is_dir():
            void += sum(1 for p in folder.glob("*.void-*") if p.is_dir())
    for _phase, _attempt, paths in case_store.attempts():
        try:
            feedback = read_model(paths.feedback, Feedback)
        except StoreError:  # unreadable: the try is graded again, and counted then
            continue
        if feedback is not None and feedback.verdict != "void" and paths.run.exists():
            ran += 1
    return {field: n for field, n in (("runs:ran", ran), ("runs:void", void)) if n}
