"""The work step of a goal's iteration: the runner's agent works the TODO in a private copy of the
goal's workspace, one call per attempt. The fleet enforces `attempts_per_task`: each call is one
attempt at each task still open (its TODO lists only those), and the fleet calls again while tasks stay
open, at most `attempts_per_task` times. What each call did to each task is read from the agent's own
`out/` (its progress log); what the fleet keeps, `WORKER_PROGRESS.jsonl` and `task_results.json`, is the
fleet's record of the attempts it made and what it observed of them. The workspace is then committed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from service.core.errors import SystemRepoError
from service.core.io.files import write_atomic
from service.kinds.goals.state import IterationState, ProgressEntry, TodoTask, WorkerResult, WorkRecord
from service.kinds.goals.store import (
    CHANGES_FILE,
    PROGRESS_FILE,
    TASK_RESULTS_FILE,
    TODO_FILE,
    WORKER_RESULT_FILE,
)
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import WORK_PROGRESS, GoalStepExit
from workers.kinds.goals.outputs import progress_entries, read_or_none, worker_result
from workers.kinds.goals.run import GoalRun
from workers.kinds.goals.steps import call_agent, exit_words, finished, fresh_attempts


@dataclass
class Tally:
    """The attempts the fleet made at a TODO's tasks, and what it saw come of each."""

    tasks: list[TodoTask]
    log: list[ProgressEntry] = field(default_factory=list)
    done: dict[str, ProgressEntry] = field(default_factory=dict)
    """Task id -> its last attempt's ending entry."""
    attempts: int = 0
    result: WorkerResult | None = None
    error: str | None = None

    def open(self) -> list[TodoTask]:
        return [t for t in self.tasks if t.id not in self.done or self.done[t.id].event != "finished"]

    def observe(
        self, tasks: list[TodoTask], started: datetime, folder: StepFolder, exit_: GoalStepExit
    ) -> None:
        """Record one call's attempt at `tasks` from what the agent left in `out/`."""
        self.attempts += 1
        said = {e.task: e for e in progress_entries(read_or_none(folder.outputs / WORK_PROGRESS) or "")}
        ended = datetime.now(UTC)
        for task in tasks:
            report = said.get(task.id)
            event = "finished" if report is not None and report.event == "finished" else "failed"
            summary = report.summary if report is not None else "the worker's agent reported nothing of it"
            self.log.append(ProgressEntry(task=task.id, event="started", attempt=self.attempts, at=started))
            ending = ProgressEntry(
                task=task.id, event=event, summary=summary, attempt=self.attempts, at=ended
            )
            self.log.append(ending)
            self.done[task.id] = ending
        self.result = worker_result(folder, exit_words(exit_))
        if exit_.error is not None:
            self.error = f"attempt {self.attempts}: the agent {exit_.error}"
        elif self.result.status == "failed" and self.result.summary.startswith("worker_result.json"):
            self.error = f"attempt {self.attempts}: {self.result.summary}"

    def outcome(self) -> WorkerResult:
        finished_n = sum(1 for e in self.done.values() if e.event == "finished")
        status = "completed" if finished_n == len(self.tasks) else "partial" if finished_n else "failed"
        summary = self.result.summary if self.result else f"{finished_n} of {len(self.tasks)} tasks finished"
        return WorkerResult(status=status, summary=summary, task_results=TASK_RESULTS_FILE)

    def task_results(self) -> list[dict[str, object]]:
        return [
            {"task": e.task, "status": e.event, "attempts": e.attempt, "summary": e.summary}
            for e in self.done.values()
        ]


def todo_of(tasks: list[TodoTask]) -> str:
    return "".join(f"- [ ] {task.id}: {task.title}\n" for task in tasks)


async def work(goal_run: GoalRun, it: IterationState) -> None:
    """Work the TODO, task attempts bounded by the fleet, in a private copy of the workspace; commit it."""
    began = time.monotonic()
    base = it.workspace_base or ""
    tasks = it.plan.tasks if it.plan is not None else []

    async def attempts(step_dir: Path) -> Tally:
        workspace = step_dir / "workspace"  # the agent's: made fresh in the step's folder
        await goal_run.workspace.private_copy(base, workspace)
        tally = Tally(tasks)
        while tally.attempts < goal_run.state.limits.attempts_per_task and (open_ := tally.open()):
            if tally.attempts:  # the last attempt's outputs are kept beside the next one's
                (step_dir / "out").rename(step_dir / f"out-{tally.attempts}")
            todo = step_dir / TODO_FILE
            write_atomic(todo, todo_of(open_).encode(), durable=False)
            started = datetime.now(UTC)
            exit_ = await call_agent(
                goal_run, it, "work", step_dir, workspace, {"todo": todo}, tally.attempts + 1
            )
            tally.observe(open_, started, StepFolder(step_dir), exit_)
        return tally

    tally = await fresh_attempts(goal_run, it, "work", attempts)
    result = tally.outcome()
    workspace = goal_run.step_dir(it.iteration, "work") / "workspace"
    try:
        after = await goal_run.workspace.commit_folder(
            workspace, base, f"goal {goal_run.spec.id}: iteration {it.iteration}"
        )
        after = after or base
    except SystemRepoError as exc:  # a nested repository, a link out of the workspace: the work's fault
        after = base
        why = f"the workspace could not be recorded: {exc}"
        result = WorkerResult(status="failed", summary=why, task_results=TASK_RESULTS_FILE)
        tally.error = tally.error or why
    changes = await goal_run.workspace.diff(base, after)
    folder = goal_run.store.iteration_dir(it.iteration)
    await goal_run.lease.check()
    progress = "".join(entry.model_dump_json() + "\n" for entry in tally.log)
    write_atomic(folder / PROGRESS_FILE, progress.encode())
    write_atomic(folder / CHANGES_FILE, changes.encode())
    write_atomic(folder / TASK_RESULTS_FILE, json.dumps(tally.task_results(), indent=2).encode())
    write_atomic(folder / WORKER_RESULT_FILE, result.model_dump_json(indent=2).encode())
    it.work = WorkRecord(
        result=result,
        tasks_finished=sum(1 for e in tally.done.values() if e.event == "finished"),
        tasks_failed=sum(1 for e in tally.done.values() if e.event != "finished"),
        attempts=max(1, tally.attempts),
        error=tally.error,
        workspace_before=base,
        workspace_after=after,
        duration_ms=finished(goal_run, it, "work", began, result.summary, outcome=result.status),
    )
    goal_run.state.workspace = after
    it.status = "reviewing"
    await goal_run.persist()
