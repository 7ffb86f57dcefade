"""A goal's folder in the store: its spec, state, trace, result and iterations.

<store>/goals/<goal>/
    GOAL_SPEC.json          the spec as submitted (absolute paths)
    GOAL_STATE.json         the state (service.core.models.goal_state), schema-validated, written atomically
    GOAL_TRACE.jsonl        the state's events, one per line, each appended once
    GOAL_RESULT.md          the account for people, rendered from the state (service.goals.result)
    workspace.git/          the workspace as a bare git repository: a commit per work step
    workspace-snapshots/    read-only trees of its commits
    iterations/NN/          TODO.md  WORKER_PROGRESS.jsonl  worker_result.json  task_results.json
                            review.json  changes.diff  ITERATION_STATE.json, and the per-lease step
                            folders plan-<token>/ work-<token>/ review-<token>/ (a void one set aside
                            as <name>.void-<n>)

Only the worker holding the goal's lease writes here (every write is fenced by the caller).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from service.core.errors import StoreError
from service.core.files import read_model, write_atomic, write_model
from service.core.models.goal import GoalSpec
from service.core.models.goal_state import GoalState, IterationState
from service.goals.result import render_result

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


class GoalStore:
    """One goal's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec_file = root / SPEC_FILE
        self.state_file = root / STATE_FILE
        self.trace_file = root / TRACE_FILE
        self.result_file = root / RESULT_FILE
        self.workspace_repo = root / "workspace.git"
        self.workspace_snapshots = root / "workspace-snapshots"

    @property
    def goal_id(self) -> str:
        return self.root.name

    def exists(self) -> bool:
        return self.spec_file.is_file()

    def spec(self) -> GoalSpec:
        spec = read_model(self.spec_file, GoalSpec)
        if spec is None:
            raise StoreError(f"{self.spec_file}: the goal's spec is missing")
        return spec

    def write_spec(self, spec: GoalSpec) -> None:
        write_model(self.spec_file, spec)

    def state(self) -> GoalState | None:
        """The state, None before the goal's first start; StoreError naming the file if it is invalid."""
        return read_model(self.state_file, GoalState)

    def iteration_dir(self, iteration: int) -> Path:
        return self.root / "iterations" / f"{iteration:02d}"

    def save(self, state: GoalState) -> None:
        """Persist a change: the iteration's snapshot, the rendered result, the state (validated,
        atomic), then the trace events the file lacks. Safe to repeat after any interruption."""
        checked = GoalState.model_validate(state.model_dump())
        current = checked.current()
        if current is not None:  # the derived files first: a reader that sees the state sees them too
            self.write_iteration(current)
        write_atomic(self.result_file, render_result(checked, self.root).encode(), durable=False)
        write_model(self.state_file, checked)
        self._sync_trace(checked)  # after the state, which holds every event: never one twice

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


class GoalsStore:
    """The `goals/` folder of the store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def goal(self, goal_id: str) -> GoalStore:
        return GoalStore(self.root / goal_id)

    def all(self) -> Iterator[GoalStore]:
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return
        for name in names:
            goal = self.goal(name)
            if goal.exists():
                yield goal
