"""The watch's pure parts on hand-built snapshots: the two screens, the keys, the state, the log tail."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console, RenderableType

from service.core.models.events import EventKind, event_of
from service.core.models.status import FleetStatus, LockHolder, TuningStatus, WorkerStatus
from service.core.store import Store
from service.watch.logtail import LogTail, find_step_log, read_tail
from service.watch.snapshot import LockState, RunningStep, WatchSnapshot
from service.watch.state import WatchState
from service.watch.terminal import parse_keys
from service.watch.view import follow, overview

NOW = datetime(2025, 1, 2, 12, 0, 0, tzinfo=UTC)
WIDTH = 100


def running(case: str, step: str = "run", job: str | None = None) -> RunningStep:
    return RunningStep.model_validate(
        {
            "tuning": "t1",
            "job_id": job or f"job-{case}",
            "case": case,
            "rev": 1,
            "worker": "w1",
            "step": step,
            "phase": "nomem",
            "attempt": 1,
            "since": NOW - timedelta(seconds=75),
        }
    )


def snapshot(cases: list[str], events: int = 0) -> WatchSnapshot:
    status = FleetStatus(
        queue_depth=7,
        in_progress=len(cases),
        breaker={"state": "closed"},
        paused=False,
        workers=[WorkerStatus(name="w1", slots=4, cases=[], last_seen_ms=0)],
        tunings=[TuningStatus(name="t1", running=len(cases), tokens=12_345, cost_usd=0.25)],
    )
    return WatchSnapshot(
        taken_at=NOW,
        status=status,
        running=[running(c) for c in cases],
        locks=[LockState(tuning="t1", holder_token=42, pending=1)],
        events=[
            event_of(
                dict(
                    at=NOW,
                    kind=EventKind.CASE_STARTED,
                    tuning="t1",
                    case=f"c{i}",
                    detail=f"event-{i:03d}",
                    data={"lease": i, "lost_leases": 0, "suspect": None, "try": 1},
                )
            )
            for i in range(events)
        ],
    )


def rendered(renderable: RenderableType, height: int, width: int = WIDTH) -> list[str]:
    console = Console(width=width, height=height, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text().rstrip("\n").split("\n")


def test_the_overview_shows_queue_running_tokens_lock_and_breaker() -> None:
    """The overview's head and tables carry the queue depth, the case under way, tokens, cost and the lock."""
    text = "\n".join(rendered(overview(snapshot(["alpha"]), 0, WIDTH, 30), 30))
    assert "queue 7" in text and "running 1" in text and "breaker closed" in text
    assert "tokens 12,345" in text and "$0.2500" in text
    assert "held, handing over, 1 waiting" in text
    assert "alpha r1" in text and "nomem/1" in text and "1m15s" in text


def test_the_height_limits_the_event_rows_to_what_fits() -> None:
    """With more events than rows, the overview fills exactly the height and shows the newest events."""
    snap = snapshot(["alpha"], events=200)
    for height in (12, 20, 40):
        lines = rendered(overview(snap, 0, WIDTH, height), height)
        shown = [line for line in lines if "event-" in line]
        assert len(lines) == height
        assert shown and shown[-1].rstrip().endswith("event-199")
        assert len(shown) == height - 11  # head, tuning table 2, under way 4, events 3, footer


def test_goal_events_show_their_goal_iteration_step_and_end() -> None:
    """A goal's finished step shows the goal, its iteration, its step and duration; the goal's end is drawn
    in the colour of its status, as a case's end is (the styles come from the contract's ends)."""
    snap = snapshot([]).model_copy(
        update={
            "events": [
                event_of(
                    dict(
                        at=NOW,
                        kind=EventKind.STEP_FINISHED,
                        tuning="",
                        goal="g1",
                        iteration=2,
                        step="work",
                        duration_ms=63_000,
                        detail="did the work",
                    )
                ),
                event_of(
                    dict(
                        at=NOW, kind=EventKind.GOAL_FAILED, tuning="", goal="g1", iteration=2, detail="voids"
                    )
                ),
                event_of(
                    dict(at=NOW, kind=EventKind.CASE_FAILED, tuning="t1", case="c1", detail="out of tries")
                ),
            ]
        }
    )
    console = Console(width=140, height=30, file=io.StringIO(), color_system="standard", record=True)
    console.print(overview(snap, 0, 140, 30))
    lines = console.export_text(clear=False).split("\n")
    finished = next(line for line in lines if "step_finished" in line)
    assert "goal g1" in finished and "it 2" in finished and "work" in finished and "1m03s" in finished
    styled = console.export_text(styles=True)
    assert "\x1b[31mgoal_failed" in styled and "\x1b[31mcase_failed" in styled


def test_a_tiny_screen_drops_sections_instead_of_overflowing() -> None:
    """Below the height all sections need, neither screen draws more rows than it has."""
    snap = snapshot(["a", "b"], events=50)
    tail = LogTail(path=Path("/s/run.log"), lines=["x"] * 20)
    for height in range(1, 12):
        assert len(rendered(overview(snap, 0, WIDTH, height), height)) <= height
        assert len(rendered(follow(snap, snap.running[0], tail, WIDTH, height), height)) <= height


def test_the_selection_highlight_follows_up_and_down() -> None:
    """Down and up move the `>` marker from row to row, stopping at both ends."""
    snap = snapshot(["alpha", "beta", "gamma"])
    state = WatchState()

    def marked() -> str:
        lines = rendered(overview(snap, state.row(snap), WIDTH, 30), 30)
        return next(line for line in lines if line.startswith(">"))

    assert "alpha" in marked()
    for key, expected in [("down", "beta"), ("down", "gamma"), ("down", "gamma"), ("up", "beta")]:
        state = state.press(key, snap)  # type: ignore[arg-type]
        assert expected in marked()
    for _ in range(5):
        state = state.press("up", snap)
    assert "alpha" in marked()


def test_the_selection_sticks_to_its_job_when_rows_above_it_go() -> None:
    """A selected case stays selected when a case above it leaves the list."""
    before = snapshot(["alpha", "beta", "gamma"])
    state = WatchState().press("down", before).press("down", before)
    after = snapshot(["beta", "gamma"])
    assert after.running[state.row(after)].case == "gamma"


def test_enter_follows_the_selected_step_and_back_returns() -> None:
    """Enter pins the selected step for the follow view; escape goes back to the overview; q quits."""
    snap = snapshot(["alpha", "beta"])
    state = WatchState().press("down", snap).press("enter", snap)
    assert state.mode == "follow" and state.follow is not None and state.follow.case == "beta"
    state = state.press("back", snap)
    assert state.mode == "overview" and state.follow is None
    assert state.press("quit", snap).quit


def test_the_follow_view_shows_the_tail_of_the_log() -> None:
    """The follow view shows the log's last lines, as many as the height leaves, newest at the bottom."""
    snap = snapshot(["alpha"])
    tail = LogTail(path=Path("/s/run.log"), lines=[f"line {i}" for i in range(100)], size_bytes=1000)
    lines = rendered(follow(snap, snap.running[0], tail, WIDTH, 10), 10)
    assert len(lines) == 10
    assert [line.strip() for line in lines[2:9]] == [f"line {i}" for i in range(93, 100)]
    assert "working" in lines[0] and "alpha r1" in lines[0]


def test_the_follow_view_folds_long_lines_within_the_height() -> None:
    """A log line wider than the screen is folded onto several rows, and the rows still fit the height."""
    snap = snapshot(["alpha"])
    tail = LogTail(path=Path("/s/run.log"), lines=["short", "x" * 250], size_bytes=300)
    lines = rendered(follow(snap, snap.running[0], tail, WIDTH, 6), 6)
    assert len(lines) <= 6
    assert [line.rstrip() for line in lines[2:5]] == ["x" * 100, "x" * 100, "x" * 50]


def test_the_follow_view_says_when_the_step_has_ended() -> None:
    """Once the followed step is over, the follow view says where its case went."""
    pinned = running("alpha", "run")
    moved = snapshot([])
    moved.running.append(running("alpha", "analyze"))
    lines = rendered(follow(moved, pinned, LogTail(), WIDTH, 8), 8)
    assert "done; the case is now at analyze nomem/1" in lines[0]
    assert "(no output yet)" in "\n".join(lines)


def test_waiting_cases_and_the_lock_holder_read_as_words() -> None:
    """A case waiting to start a step shows what it waits for (row, tunings table, follow view), and a held
    lock shows its holder's case and worker instead of its token."""
    shot = snapshot(["alpha"])
    shot.running[0] = shot.running[0].model_copy(update={"waiting": "resume"})
    shot.status.tunings[0].waiting_by_cause = {"resume": 1}
    holder = LockHolder(case="beta", rev=2, worker="w9", phase="mem", attempt=1)
    shot.locks[0] = LockState(tuning="t1", holder_token=42, holder=holder)
    text = "\n".join(rendered(overview(shot, 0, 160, 30), 30, 160))
    assert "held by beta r2 on w9" in text and "#42" not in text
    assert "1 waiting for resume" in text
    assert "nomem/1 waiting for resume w1" in " ".join(text.split())
    title = rendered(follow(shot, shot.running[0], LogTail(), WIDTH, 8), 8)[0]
    assert "waiting for resume 1m15s" in title


def test_keys_are_decoded_from_terminal_bytes() -> None:
    """Arrow keys (normal and application mode), escape, enter, backspace, j/k and q decode to keys."""
    assert parse_keys(b"\x1b[A\x1b[B\x1bOA\x1bOB") == ["up", "down", "up", "down"]
    assert parse_keys(b"\x1b") == ["back"]
    assert parse_keys(b"\x1b[D\x7f\r") == ["back", "back", "enter"]
    assert parse_keys(b"jkq") == ["down", "up", "quit"]
    assert parse_keys(b"\x1b[1;5A\x1b[3~x") == ["up"]


def test_the_log_tail_finds_the_newest_step_folder_and_reads_its_end(tmp_path: Path) -> None:
    """The follow view reads `<step>.log` of the folder the worker named, else of the newest, only its end."""
    store = Store(tmp_path)
    step = running("alpha", "run")
    attempt = tmp_path / "tunings" / "t1" / "cases" / "alpha" / "r1" / "nomem" / "1"
    for token, text in [(9, "old\n"), (12, "".join(f"new {i}\x1b[31m!\x1b[0m\n" for i in range(50)))]:
        (attempt / f"run-{token}").mkdir(parents=True)
        (attempt / f"run-{token}" / "run.log").write_text(text)
    (attempt / "analyze-13").mkdir()
    found = find_step_log(store, step)
    assert found == attempt / "run-12" / "run.log"
    assert find_step_log(store, step.model_copy(update={"work": "run-9"})) == attempt / "run-9" / "run.log"
    tail = read_tail(found, max_lines=3, max_bytes=100)
    assert tail.lines == ["new 47!", "new 48!", "new 49!"]
    assert read_tail(attempt / "run-99" / "run.log", max_lines=3).lines == []


def test_a_step_log_an_agent_replaced_is_not_followed_nor_waited_on(tmp_path: Path) -> None:
    """A step log that an agent made a link (to a file of the operator's) or a named pipe is shown as
    empty: the link is not followed, and the pipe is not opened for a read that would wait for ever."""
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY\n")
    linked = tmp_path / "linked.log"
    linked.symlink_to(secret)
    piped = tmp_path / "piped.log"
    os.mkfifo(piped)
    assert read_tail(linked, max_lines=3).lines == []
    assert read_tail(piped, max_lines=3).lines == []
