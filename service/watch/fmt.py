"""Small formatting helpers of the watch's views: durations, times, event styles, plain tables."""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.table import Column, Table
from rich.text import Text

from service.core.models.event_data import EvalTagged
from service.core.models.events import CASE_ENDS, Event, EventKind
from service.kinds.goals.models import GOAL_ENDS
from service.watch.snapshot import LockState, RunningStep

END_STYLE = {
    "completed": "green",
    "difficult": "yellow",
    "incomplete": "yellow",
    "failed": "red",
    "cancelled": "magenta",
}
KIND_STYLE: dict[EventKind, str] = {
    **{kind: END_STYLE[state] for state, kind in CASE_ENDS.items()},
    **{kind: END_STYLE[status] for status, kind in GOAL_ENDS.items()},
    EventKind.RUN_SANDBOX_DOWN: "bold red",
    EventKind.APPLY_ABANDONED: "red",
    EventKind.ANALYSIS_EDITED_SYSTEM: "yellow",
    EventKind.PLAN_INVALID: "yellow",
    EventKind.REVIEW_INVALID: "yellow",
    EventKind.STEP_STARTED: "dim",
}
"""How the events table shows a kind (a case's or a goal's end in the colour of its outcome)."""


def line(*parts: str | tuple[str, str], style: str = "") -> Text:
    """One screen row: never wraps, cut with an ellipsis when too wide."""
    return Text.assemble(*parts, style=style, no_wrap=True, overflow="ellipsis")


def plain_table(*headers: str, expand_last: bool = False) -> Table:
    """A borderless table whose every row is exactly one screen row (cells are cut, never wrapped)."""
    columns = [
        Column(
            h,
            no_wrap=True,
            overflow="ellipsis",
            ratio=1 if expand_last and i == len(headers) - 1 else None,
        )
        for i, h in enumerate(headers)
    ]
    return Table(
        *columns,
        box=None,
        show_header=True,
        header_style="bold",
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        expand=expand_last,
    )


def duration(span: timedelta) -> str:
    """`42s`, `3m04s`, `2h05m`."""
    total_s = max(0, int(span.total_seconds()))
    if total_s < 60:
        return f"{total_s}s"
    minutes, seconds = divmod(total_s, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def running_for(step: RunningStep, now: datetime) -> str:
    return duration(now - step.since) if step.since is not None else ""


def clock(at: datetime) -> str:
    return at.astimezone().strftime("%H:%M:%S")


def where(phase: str | None, attempt: int | None) -> str:
    if phase is None:
        return ""
    return f"{phase}/{attempt}" if attempt is not None else phase


def event_try(event: Event) -> str:
    """A case event's phase and attempt; a goal event's iteration; an evaluation item's repeat (an item
    has one try: its attempt is not a try of the loop)."""
    if event.iteration is not None:
        return f"it {event.iteration}"
    data = event.data
    if isinstance(data, EvalTagged) and data.eval is not None and data.repeat is not None:
        return f"repeat {data.repeat}"
    return where(event.phase, event.attempt)


def event_detail(event: Event) -> str:
    parts = [event.detail or ""]
    if event.duration_ms is not None:
        parts.append(duration(timedelta(milliseconds=event.duration_ms)))
    if event.tokens:
        parts.append(f"{event.tokens:,} tok")
    return "  ".join(p for p in parts if p)


def lock_cell(lock: LockState | None) -> Text:
    if lock is None:
        return Text("")
    waiting = f", {lock.pending} waiting" if lock.pending else ""
    if lock.holder_token is None:
        return Text(f"free{waiting}", style="dim" if not waiting else "yellow")
    if lock.holder is None:
        return Text(f"held, handing over{waiting}", style="yellow")
    by = f"{lock.holder.case} r{lock.holder.rev} on {lock.holder.worker or '?'}"
    return Text(f"held by {by}{waiting}", style="yellow")
