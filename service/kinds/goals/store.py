"""A goal's folder in the store: its spec, state, trace, result and iterations.

<store>/goals/<goal>/
    GOAL_SPEC.json          the spec as submitted (absolute paths)
    GOAL_STATE.json         the state (service.kinds.goals.state), schema-validated, written atomically
    GOAL_TRACE.jsonl        the state's events, one per line, each appended once
    GOAL_RESULT.md          the account for people, rendered from the state (service.kinds.goals.result)
    GOAL_SPENT.jsonl        spend no holder could write into the state (folded in by the next one)
    .lock                   held (flock) by whoever writes the state, for that write
    workspace.git/          the workspace as a bare git repository: a commit per work step
    workspace-snapshots/    read-only trees of its commits
    iterations/NN/          TODO.md  WORKER_PROGRESS.jsonl  worker_result.json  task_results.json
                            review.json  changes.diff  ITERATION_STATE.json, and the per-lease step
                            folders plan-<token>/ work-<token>/ review-<token>/ (a void one set aside
                            as <name>.void-<n>)

Only the worker holding the goal's lease writes here (every write is fenced by the caller), except a
cancel: whoever cancels writes it into the state at once. So every write of the state reads the state
first under the goal's lock (`locked`), and keeps a cancel it finds there.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from service.core.errors import StoreError
from service.core.io.files import append_line, read_model, write_atomic, write_model
from service.core.runs import RunFolder, RunsFolder
from service.core.validation import valid_only
from service.kinds.goals.errors import GoalBusyError, UnknownGoalError
from service.kinds.goals.models import FINAL_STATUSES, GoalLimits, GoalSpec
from service.kinds.goals.result import render_result
from service.kinds.goals.state import GoalSpend, GoalState, IterationState

SPEC_FILE = "GOAL_SPEC.json"
STATE_FILE = "GOAL_STATE.json"
TRACE_FILE = "GOAL_TRACE.jsonl"
RESULT_FILE = "GOAL_RESULT.md"
ITERATION_FILE = "ITERATION_STATE.json"
TODO_FILE = "TODO.md"
PROGRESS_FILE = "WORKER_PROGRESS.jsonl"
WORKER_RESULT_FILE = "worker_result.json"
TASK_RESULTS_FILE = "task_results.json"
REVIEW_FILE = "review.json"
CHANGES_FILE = "changes.diff"
SPENT_FILE = "GOAL_SPENT.jsonl"
LOCK_FILE = ".lock"
LOCK_WAIT_S = 10.0
"""How long a goal's lock is waited for before its holder is taken for one that no longer answers."""
LOCK_RETRY_S = (0.001, 0.05)
"""The first and the longest pause between two tries of a goal's lock (flock has no timeout of its own)."""


def starting_state(
    spec: GoalSpec, limits: GoalLimits, version: str | None, workspace: str | None
) -> GoalState:
    """The state of a goal that no worker has started: running from now, its deadline set."""
    now = datetime.now(UTC)
    return GoalState(
        goal_id=spec.id,
        goal=spec.goal,
        status="running",
        limits=limits,
        tuning=spec.tuning,
        version=version,
        workspace=workspace,
        started_at=now,
        updated_at=now,
        deadline_at=now + timedelta(seconds=limits.timeout_s),
    )


class GoalStore(RunFolder[GoalSpec], spec_file=SPEC_FILE, spec=GoalSpec):
    """One goal's folder."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.state_file = root / STATE_FILE
        self.trace_file = root / TRACE_FILE
        self.result_file = root / RESULT_FILE
        self.workspace_repo = root / "workspace.git"
        self.workspace_snapshots = root / "workspace-snapshots"

    def missing_spec(self) -> StoreError:
        return StoreError(f"{self.spec_file}: the goal's spec is missing")

    def unknown(self) -> UnknownGoalError:
        return UnknownGoalError(f"no goal {self.run_id!r} in the store {self.root.parent.parent}")

    def state(self) -> GoalState | None:
        """The state, None before the goal's first start; StoreError naming the file if it is invalid."""
        return read_model(self.state_file, GoalState)

    def iteration_dir(self, iteration: int) -> Path:
        return self.root / "iterations" / f"{iteration:02d}"

    @contextmanager
    def locked(self, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
        """Hold the goal's lock (an flock on `.lock`) while reading and writing its state. Its holders keep
        it for one read and one write; one that keeps it past `wait_s` is not answering (a worker frozen,
        or stuck on its disk, while it wrote): GoalBusyError, rather than a wait with no end."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock_within(fd, wait_s, self.root / LOCK_FILE)
            yield
        finally:
            os.close(fd)

    def save(self, state: GoalState, wait_s: float = LOCK_WAIT_S) -> None:
        """Persist a change, keeping a cancel that was written meanwhile (into `state` too); GoalBusyError
        when the lock is held past `wait_s`."""
        with self.locked(wait_s):
            stored = self.state()
            kept = stored is not None and stored.cancel is not None and state.cancel is None
            if kept and stored is not None and state.status not in FINAL_STATUSES:
                state.cancel = stored.cancel
            self.write_state(state)

    def create(self, state: GoalState, wait_s: float = LOCK_WAIT_S) -> GoalState:
        """Write a goal's first state, unless one was written meanwhile (a cancel): the state that holds;
        GoalBusyError when the lock is held past `wait_s`."""
        with self.locked(wait_s):
            stored = self.state()
            if stored is not None:
                return stored
            self.write_state(state)
            return state

    def write_state(self, state: GoalState) -> None:
        """Write a state (holding `locked`): the iteration's snapshot, the rendered result, the state
        (validated, atomic), then the trace events the file lacks. Safe to repeat after any interruption."""
        checked = GoalState.model_validate(state.model_dump())
        current = checked.current()
        if current is not None:  # the derived files first: a reader that sees the state sees them too
            self.write_iteration(current)
        write_atomic(self.result_file, render_result(checked, self.root).encode(), durable=False)
        write_model(self.state_file, checked)
        self._sync_trace(checked)  # after the state, which holds every event: never one twice

    def note_spend(self, spend: GoalSpend) -> None:
        """Append spend that no state write records (not fenced: it was spent, whoever holds the goal)."""
        append_line(self.root / SPENT_FILE, spend.model_dump_json())

    def spends(self, after: int) -> tuple[list[GoalSpend], int]:
        """The ledger's spends past its first `after` lines, and its number of lines (a torn last line is
        left for later; an invalid one counts as read)."""
        try:
            lines = (self.root / SPENT_FILE).read_text().split("\n")[:-1]
        except FileNotFoundError:
            return [], 0
        return valid_only(GoalSpend, lines[after:]), len(lines)

    def write_iteration(self, iteration: IterationState) -> None:
        write_model(self.iteration_dir(iteration.iteration) / ITERATION_FILE, iteration)

    def _sync_trace(self, state: GoalState) -> None:
        """Append the events past the file's last complete line (a torn last line is cut first)."""
        try:
            data = self.trace_file.read_bytes()
        except FileNotFoundError:
            data = b""
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            with open(self.trace_file, "r+b") as torn:
                torn.truncate(whole)
        written = data[:whole].count(b"\n")
        new = state.trace[written:]
        if not new:
            return
        lines = "".join(event.model_dump_json() + "\n" for event in new).encode()
        fd = os.open(self.trace_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)


class GoalsStore(RunsFolder[GoalStore]):
    """The `goals/` folder of the store."""

    noun = "goal"

    def run(self, run_id: str) -> GoalStore:
        return GoalStore(self.root / run_id)

    goal = run


def _flock_within(fd: int, wait_s: float, path: Path) -> None:
    """Take the exclusive flock on `fd` within `wait_s`, else GoalBusyError naming `path`."""
    deadline = time.monotonic() + wait_s
    pause_s, longest_s = LOCK_RETRY_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise GoalBusyError(
                    f"{path}: held by another process for more than {wait_s:g} s (a worker frozen while it "
                    "wrote the goal's state?); nothing was changed, try again"
                ) from None
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, longest_s)
