"""The built-in demo agents' goal steps: in-process, deterministic, driven by the goal's `demo` knobs
(workers.adapters.demo_knobs.GoalDemoKnobs), writing the same `out/` files a command agent writes.

- plan: a TODO of `tasks` tasks, the previous review's remaining work first, and its summary
  (`out/plan.json`); an invalid one (no task) in the iterations listed in `invalid_todo`;
- work: one attempt at each task of the TODO it is given (the fleet calls again for the open ones):
  every task fails its first `task_failures` attempts; a finished task leaves
  `tasks/<iteration>-<id>.md` in the workspace; the first `kills_worker` work steps SIGKILL the worker;
- review: complete from iteration `complete_at` on, else the remaining work for the next plan;
- `hang` makes one step of one iteration never end; `voids` makes a step's first runs void; every step
  spends `tokens` (priced like the demo's case steps) from its start; while the tuning's demo
  `outage_file` exists, the sandbox is down.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from service.core.io.files import append_line, write_atomic
from service.core.models.records import Usage
from service.core.models.tuning import DemoAdapter
from service.kinds.goals.state import ProgressEntry, Review, WorkerResult
from service.kinds.goals.todo import TodoError, parse_todo
from workers.adapters.demo_knobs import GoalDemoKnobs, read_knobs
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import (
    PLAN_OUTPUT,
    PLAN_SUMMARY,
    REVIEW_OUTPUT,
    WORK_PROGRESS,
    WORK_RESULT,
    GoalStepExit,
    GoalStepRequest,
    PlanSummary,
)
from workers.meter import follow_spend


class DemoGoalAgent:
    """The demo agent for every goal step."""

    def __init__(self, config: DemoAdapter) -> None:
        self._config = config

    async def goal_step(self, request: GoalStepRequest) -> GoalStepExit:
        began = time.monotonic()
        knobs = read_knobs(GoalDemoKnobs, request.demo, f"goal {request.goal_id}")
        folder = StepFolder.ready(request.step_dir)
        append_line(request.log_file, f"demo-{request.step}: iteration {request.iteration} started")
        outage = self._config.outage_file
        if outage is not None and outage.exists():
            return GoalStepExit(exit_code=75, duration_ms=_ms(began), sandbox_down="demo sandbox is down")
        spent = self._spend(knobs.tokens)
        if spent is not None:
            follow_spend(lambda: spent)  # spent from the start: a step cut short has spent it too
        if knobs.hang is not None and (knobs.hang.step, knobs.hang.iteration) == (
            request.step,
            request.iteration,
        ):
            await asyncio.Event().wait()  # ended only by the fleet's deadline or a cancel
        await asyncio.sleep(knobs.step_ms / 1000)
        if request.run_index <= knobs.voids.get(request.step, 0):
            return GoalStepExit(
                exit_code=1, void="demo: injected infrastructure fault", duration_ms=_ms(began), spent=spent
            )
        if request.step == "plan":
            _plan(request, knobs, folder)
        elif request.step == "work":
            _kill_worker(request, knobs)
            _work(request, knobs, folder)
        else:
            _review(request, knobs, folder)
        return GoalStepExit(exit_code=0, duration_ms=_ms(began), spent=spent)

    def _spend(self, tokens: int) -> Usage | None:
        if tokens == 0:
            return None
        cost_usd = round(tokens / 1000 * self._config.usd_per_1k_tokens, 6)
        return Usage(input_tokens=tokens, cost_usd=cost_usd, source="api")


def _kill_worker(request: GoalStepRequest, knobs: GoalDemoKnobs) -> None:
    """The `kills_worker` fault: this work step takes its whole worker down (SIGKILL), counted by
    marker files in the goal's folder (across workers and attempts)."""
    goal_dir = request.step_dir.parents[2]
    killed = len(list(goal_dir.glob("worker-killed-*")))
    if killed < knobs.kills_worker:
        (goal_dir / f"worker-killed-{killed + 1}").touch()
        os.kill(os.getpid(), signal.SIGKILL)


def _ms(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


def _plan(request: GoalStepRequest, knobs: GoalDemoKnobs, folder: StepFolder) -> None:
    brief = request.brief
    lines = [f"# Iteration {request.iteration}: {brief.goal}", ""]
    if request.iteration in knobs.invalid_todo:
        lines.append("Nothing is planned yet.")  # no checkbox item: the fleet refuses it
    else:
        titles = [*brief.remaining_work, *[f"work towards the goal, part {n}" for n in range(1, 51)]]
        for n, title in enumerate(titles[: knobs.tasks], start=1):
            lines.append(f"- [ ] T{n}: {title}")
        summary = PlanSummary(summary=f"{knobs.tasks} tasks towards: {brief.goal}")
        write_atomic(folder.outputs / PLAN_SUMMARY, summary.model_dump_json().encode(), durable=False)
    write_atomic(folder.outputs / PLAN_OUTPUT, ("\n".join(lines) + "\n").encode(), durable=False)


def _work(request: GoalStepRequest, knobs: GoalDemoKnobs, folder: StepFolder) -> None:
    """One attempt (the brief's) at each task of the TODO: it fails while within `task_failures`."""
    try:
        tasks = parse_todo(request.inputs["todo"].read_text())
    except (OSError, KeyError, TodoError) as exc:
        result = WorkerResult(status="failed", summary=f"demo: cannot read the TODO: {exc}")
        write_atomic(folder.outputs / WORK_RESULT, result.model_dump_json().encode(), durable=False)
        return
    progress = folder.outputs / WORK_PROGRESS
    attempt = request.brief.attempt
    finished = 0
    for task in tasks:
        _progress(progress, task.id, "started", f"attempt {attempt}", attempt)
        if attempt <= knobs.task_failures:
            _progress(progress, task.id, "failed", "demo: the task failed", attempt)
            continue
        note = request.workspace_dir / "tasks" / f"{request.iteration:02d}-{task.id}.md"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(f"# {task.title}\n\nDone in iteration {request.iteration}.\n")
        _progress(progress, task.id, "finished", f"wrote {note.name}", attempt)
        finished += 1
    status = "completed" if finished == len(tasks) else "partial" if finished else "failed"
    result = WorkerResult(
        status=status, summary=f"{finished} of {len(tasks)} tasks finished at attempt {attempt}"
    )
    write_atomic(folder.outputs / WORK_RESULT, result.model_dump_json().encode(), durable=False)


def _progress(
    path: Path, task: str, event: Literal["started", "finished", "failed"], summary: str, attempt: int
) -> None:
    entry = ProgressEntry(task=task, event=event, summary=summary, attempt=attempt, at=datetime.now(UTC))
    append_line(path, entry.model_dump_json())


def _review(request: GoalStepRequest, knobs: GoalDemoKnobs, folder: StepFolder) -> None:
    complete = request.iteration >= knobs.complete_at
    remaining = [] if complete else [f"continue the goal in iteration {request.iteration + 1}"]
    review = Review(
        decision="complete" if complete else "continue",
        complete=complete,
        summary=f"demo review of iteration {request.iteration}",
        rationale=f"the demo reviewer completes the goal at iteration {knobs.complete_at}",
        remaining_work=remaining,
    )
    write_atomic(folder.outputs / REVIEW_OUTPUT, review.model_dump_json().encode(), durable=False)
