"""The events of evaluations and the live counters they move, in the tuning's counters hash
(`tf:stats:<tuning>`, service.core.events.counter_moves), so that status reads an evaluation's
progress in the round trip that reads its tuning's:

    eval:<id>:items            the items it has (moved by `eval_created`)
    eval:<id>:<outcome>        items ended, by outcome: pass, fail (graded), failed, cancelled
    eval:<id>:void             void runs set aside
    eval_items:<outcome>       the same outcomes summed over the tuning's evaluations (metrics)
"""

from __future__ import annotations

from service.core.models.events import Event, EventKind

EVAL_CREATED = EventKind.EVAL_CREATED
ITEM_STARTED = EventKind.EVAL_ITEM_STARTED
ITEM_SET_ASIDE = EventKind.EVAL_ITEM_SET_ASIDE
ITEM_ENDED = EventKind.EVAL_ITEM_ENDED
"""One per item outcome; `data.outcome`: pass, fail, failed or cancelled."""

OUTCOMES = ("pass", "fail", "failed", "cancelled")
PREFIX = "eval:"


def eval_counter_moves(event: Event) -> dict[str, int]:
    """The counters an evaluation's event moves (none for any other event)."""
    eval_id = event.data.get("eval")
    if not isinstance(eval_id, str):
        return {}
    if event.kind is EVAL_CREATED:
        return {f"{PREFIX}{eval_id}:items": int(event.data.get("items", 0))}
    if event.kind is ITEM_SET_ASIDE:
        return {f"{PREFIX}{eval_id}:void": 1, "eval_items:void": 1}
    outcome = event.data.get("outcome")
    if event.kind is ITEM_ENDED and outcome in OUTCOMES:
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
