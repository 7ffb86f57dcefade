"""Small formatting helpers of the watch's views: durations, times, event styles, plain tables."""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.table import Column, Table
from rich.text import Text

from service.core.models.events import Event
from service.watch.snapshot import LockState, RunningStep

KIND_STYLE = {
    "case_completed": "green",
    "case_difficult": "yellow",
    "case_failed": "red",
    "case_cancelled": "magenta",
    "run_sandbox_down": "bold red",
    "apply_abandoned": "red",
    "analysis_edited_system": "yellow",
    "step_started": "dim",
}


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
