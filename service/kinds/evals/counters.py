"""The events of evaluations and the live counters they move, in the tuning's counters hash
(`tf:stats:<tuning>`, service.core.events.counter_moves), so that status reads an evaluation's
progress in the round trip that reads its tuning's:

    eval:<id>:items            the items it has (moved by `eval_created`)
    eval:<id>:<outcome>        items ended, by outcome: pass, fail (graded), failed, cancelled
    eval:<id>:void             void runs set aside
    eval_items:<outcome>       the same outcomes summed over the tuning's evaluations (metrics)
"""

from __future__ import annotations

from service.core.models.event_types import EvalCreatedEvent, EvalItemEndedEvent, EvalItemSetAsideEvent
from service.core.models.events import EvalTagged, Event, EventKind

EVAL_CREATED = EventKind.EVAL_CREATED
ITEM_STARTED = EventKind.EVAL_ITEM_STARTED
ITEM_SET_ASIDE = EventKind.EVAL_ITEM_SET_ASIDE
ITEM_ENDED = EventKind.EVAL_ITEM_ENDED
"""One per item outcome; `data.outcome`: pass, fail, failed or cancelled."""

OUTCOMES = ("pass", "fail", "failed", "cancelled")
PREFIX = "eval:"


def eval_counter_moves(event: Event) -> dict[str, int]:
    """The counters an evaluation's event moves (none for any other event)."""
    if isinstance(event, EvalCreatedEvent):
        return {f"{PREFIX}{event.data.eval}:items": event.data.items}
    if isinstance(event, EvalItemSetAsideEvent):
        return {f"{PREFIX}{event.data.eval}:void": 1, "eval_items:void": 1}
    if isinstance(event, EvalItemEndedEvent) and event.data.outcome in OUTCOMES:
        eval_id, outcome = event.data.eval, event.data.outcome
        return {f"{PREFIX}{eval_id}:{outcome}": 1, f"eval_items:{outcome}": 1}
    return {}


def eval_progress_fields(counts: dict[str, int]) -> dict[str, dict[str, int]]:
    """Eval id -> its counters (`items`, the outcomes, `void`), from a tuning's counters hash."""
    found: dict[str, dict[str, int]] = {}
    for field, value in counts.items():
        if not field.startswith(PREFIX):
            continue
        eval_id, _, name = field[len(PREFIX) :].rpartition(":")
        if eval_id:
            found.setdefault(eval_id, {})[name] = value
    return found


def eval_rule(event: Event) -> dict[str, int] | None:
    """The evaluations' counters rule (service.kinds.registry): every event that carries `data.eval` is
    an evaluation's, and moves only its counters."""
    return eval_counter_moves(event) if of_an_evaluation(event) else None


def of_an_evaluation(event: Event) -> bool:
    """Whether the event is an evaluation's: its creation, or an item's (its payload names the
    evaluation)."""
    return isinstance(event, EvalCreatedEvent) or (
        isinstance(event.data, EvalTagged) and event.data.eval is not None
    )
