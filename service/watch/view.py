"""The watch's two screens, as pure functions from what is known to rich renderables.

Every renderable here is exactly as many rows high as it is counted, so a screen of `height`
rows holds the head, the sections and the footer with nothing cut: the overview gives the event
log as many rows as the height leaves, the follow view gives them to the agent's log.
"""

from __future__ import annotations

from rich.cells import cell_len, chop_cells
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from service.cli.render import STATE_STYLE, outcome_counts, waits_words
from service.core.models.status import TuningStatus
from service.watch.fmt import (
    KIND_STYLE,
    clock,
    event_detail,
    event_try,
    line,
    lock_cell,
    plain_table,
    running_for,
    where,
)
from service.watch.logtail import LogTail
from service.watch.snapshot import RunningStep, WatchSnapshot

OVERVIEW_KEYS = "up/down or k/j select   enter follow   q quit"
FOLLOW_KEYS = "esc, backspace or left: back   q quit"


def head(snapshot: WatchSnapshot) -> Text:
    status = snapshot.status
    tokens = sum(t.tokens for t in status.tunings)
    cost_usd = sum(t.cost_usd for t in status.tunings)
    is_open = status.breaker.get("state") == "open"
    breaker: tuple[str, str] = (
        (f"OPEN ({status.breaker.get('reason', '')})", "bold red") if is_open else ("closed", "green")
    )
    return line(
        ("tunefleet watch", "bold"),
        f"   queue {status.queue_depth}   running {status.in_progress}"
        + (f" ({words})" if (words := status.running_words()) else "")
        + f"   workers {len(status.workers)}",
        f"   tokens {tokens:,}   cost ${cost_usd:.4f}   breaker ",
        breaker,
        ("   PAUSED" if status.paused else "", "bold red"),
        f"   {clock(snapshot.taken_at)}",
    )


def footer(keys: str, alert: str | None, unreadable: int) -> Text:
    notes: list[str | tuple[str, str]] = [(keys, "dim")]
    if unreadable:
        notes.append((f"   {unreadable} unreadable entries skipped", "yellow"))
    if alert:
        notes.append((f"   {alert}", "bold red"))
    return line(*notes)


SPARE_COLUMNS = ("gates", "version", "cost $", "tokens")
"""The tunings table's columns left out, in this order, while its rows are wider than the screen
(the head line still carries the fleet's tokens and cost)."""


def gates_cell(tuning: TuningStatus) -> str:
    """The tuning's acceptance gates in a few characters: under gate, passed, rejected (empty: no gate)."""
    gates = tuning.gates
    if gates is None:
        return ""
    return f"{gates.under} on, {gates.passed} ok, {gates.rejected} no"


def tunings_table(snapshot: WatchSnapshot, max_rows: int, width: int | None = None) -> Table:
    """One row per tuning (at most `max_rows`): progress, outcomes (the words of `status`), tokens, cost,
    version and lock; within `width` cells, leaving out SPARE_COLUMNS as needed."""
    headers = ["tuning", "version", "waiting", "running", *STATE_STYLE, "tokens", "cost $", "lock", "gates"]
    locks = {lock.tuning: lock for lock in snapshot.locks}
    rows: list[list[str | Text]] = []
    for t in snapshot.status.tunings[:max_rows]:
        steps = " ".join(f"{k}:{v}" for k, v in sorted(t.running_by_step.items()))
        waits = ", ".join(waits_words(t))
        rows.append(
            [
                t.name,
                (t.version or "")[:10],
                str(t.waiting),
                f"{t.running} {steps}".strip() + (f", {waits}" if waits else ""),
                *(Text(str(n), style=STATE_STYLE[s] if n else "") for s, n in outcome_counts(t).items()),
                f"{t.tokens:,}",
                f"{t.cost_usd:.4f}",
                lock_cell(locks.get(t.name)),
                gates_cell(t),
            ]
        )
    shown = list(range(len(headers)))
    spare = [headers.index(h) for h in SPARE_COLUMNS]
    while width is not None and spare and _natural_width(headers, rows, shown) > width:
        shown.remove(spare.pop(0))
    table = plain_table(*(headers[i] for i in shown))
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def _natural_width(headers: list[str], rows: list[list[str | Text]], shown: list[int]) -> int:
    """The cells a plain table of these columns takes when nothing in it is cut."""
    widths = [max([cell_len(headers[i])] + [cell_len(str(row[i])) for row in rows]) for i in shown]
    return sum(widths) + 2 * (len(widths) - 1)


def window(total: int, selected: int, rows: int) -> range:
    """The rows of a list of `total` shown in `rows` lines, keeping `selected` in view."""
    if total <= rows:
        return range(total)
    start = min(max(0, selected - rows // 2), total - rows)
    return range(start, start + rows)


def under_way(snapshot: WatchSnapshot, selected: int, max_rows: int) -> tuple[Text, Table]:
    """The title and one row per case under way; the selected one marked `>` and highlighted."""
    shown = window(len(snapshot.running), selected, max_rows)
    span = f" (rows {shown.start + 1}-{shown.stop})" if len(shown) < len(snapshot.running) else ""
    title = line((f"under way {len(snapshot.running)}{span}", "bold"))
    table = plain_table(" ", "tuning", "case", "try", "step", "worker", "for")
    for index in shown:
        step = snapshot.running[index]
        chosen = index == selected
        table.add_row(
            ">" if chosen else " ",
            step.tuning,
            f"{step.case} r{step.rev}",
            where(step.phase, step.attempt),
            step.state,
            step.worker or "",
            running_for(step, snapshot.taken_at),
            style="reverse bold" if chosen else None,
        )
    if not snapshot.running:
        others = snapshot.status.running_words()
        table.add_row(
            " ", Text(f"no case under way; running: {others}" if others else "nothing under way", style="dim")
        )
    return title, table


def events_table(snapshot: WatchSnapshot, rows: int) -> Table:
    """The newest `rows` events, oldest at the top."""
    headers = ("time", "event", "tuning", "case", "try", "step", "worker", "detail")
    table = plain_table(*headers, expand_last=True)
    for event in snapshot.events[-rows:] if rows > 0 else []:
        table.add_row(
            clock(event.at),
            Text(event.kind, style=KIND_STYLE.get(event.kind, "")),
            event.tuning,
            event.case or (f"goal {event.goal}" if event.goal else ""),
            event_try(event),
            event.step or "",
            event.worker or "",
            event_detail(event),
        )
    return table


def overview(
    snapshot: WatchSnapshot, selected: int, width: int, height: int, *, alert: str | None = None
) -> RenderableType:
    """Queue, what is under way, tokens and cost, breaker and locks, then as many events as fit."""
    # every row is cut to the console's width as it renders; the tunings table leaves columns out first
    if height < 2:
        return Group(head(snapshot))
    parts: list[RenderableType] = []
    budget = max(0, height - 2)  # the head and the footer
    tunings_rows = min(len(snapshot.status.tunings), max(1, budget // 5))
    if budget >= tunings_rows + 1:
        parts.append(tunings_table(snapshot, tunings_rows, width))
        budget -= tunings_rows + 1
    if budget >= 4:  # a gap, a title and the header before any row
        running_rows = min(max(1, len(snapshot.running)), max(1, (budget - 3) // 2))
        parts += [Text(""), *under_way(snapshot, selected, running_rows)]
        budget -= 3 + running_rows
    if budget >= 4:
        event_rows = budget - 3
        parts += [Text(""), line(("latest events", "bold")), events_table(snapshot, event_rows)]
    return Group(head(snapshot), *parts, footer(OVERVIEW_KEYS, alert, snapshot.unreadable))


def follow_state(snapshot: WatchSnapshot, step: RunningStep) -> Text:
    """Whether the followed step is still under way, and where its case went if not."""
    now = next((r for r in snapshot.running if (r.tuning, r.job_id) == (step.tuning, step.job_id)), None)
    if now is not None and now.same_step(step) and now.waiting is not None:
        return Text(f"{now.state} {running_for(now, snapshot.taken_at)}".strip(), style="yellow")
    if now is not None and now.same_step(step):
        return Text(f"working {running_for(now, snapshot.taken_at)}".strip(), style="green")
    if now is not None:
        return Text(f"done; the case is now at {now.state} {where(now.phase, now.attempt)}", style="yellow")
    return Text("done; the case is no longer under way", style="yellow")


def log_rows(lines: list[str], width: int, rows: int) -> list[Text]:
    """The end of the log in at most `rows` screen rows, long lines folded at `width` cells."""
    picked: list[Text] = []
    for text in reversed(lines):
        chunks = chop_cells(text, max(1, width)) or [""]
        if len(picked) + len(chunks) > rows:
            break
        picked[:0] = [line(chunk) for chunk in chunks]
    return picked


def follow(
    snapshot: WatchSnapshot,
    step: RunningStep,
    tail: LogTail,
    width: int,
    height: int,
    *,
    alert: str | None = None,
) -> RenderableType:
    """One step's agent: who and where, then its log's last lines, as many as the height leaves."""
    title = line(
        ("follow ", "bold"),
        (f"{step.tuning} / {step.case} r{step.rev}   {where(step.phase, step.attempt)}   ", "bold"),
        (step.step, "bold cyan"),
        f"   worker {step.worker or '?'}   ",
    )
    title.append_text(follow_state(snapshot, step))
    if tail.path is None:
        source = line(("no log folder yet for this step", "dim"))
    else:
        source = line((f"{tail.size_bytes:,} bytes  {tail.path}", "dim"))
    if height < 3:
        return Group(*[title, source][: max(0, height)])
    rows = height - 3
    body: list[Text] = log_rows(tail.lines, width, rows)
    if not body and rows > 0:
        body = [line(("(no output yet)", "dim"))]
    return Group(title, source, *body, footer(FOLLOW_KEYS, alert, snapshot.unreadable))
