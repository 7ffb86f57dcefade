"""The built-in demo agents' goal steps: in-process, deterministic, driven by the goal's `demo` knobs
(service.core.models.goal.GoalDemoKnobs), writing the same `out/` files a command agent writes.

- plan: a TODO of `tasks` tasks, the previous review's remaining work first; an invalid one (no task)
  in the iterations listed in `invalid_todo`;
- work: every task fails `task_failures` times before it succeeds, within `attempts_per_task`; a
  finished task leaves `tasks/<iteration>-<id>.md` in the workspace;
- review: complete from iteration `complete_at` on, else the remaining work for the next plan;
- `hang` makes one step of one iteration never end; `voids` makes a step's first runs void.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from service.core.files import append_line, write_atomic
from service.core.models.goal_state import ProgressEntry, Review, WorkerResult
from service.goals.todo import TodoError, parse_todo
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import (
    PLAN_OUTPUT,
    REVIEW_OUTPUT,
    WORK_PROGRESS,
    WORK_RESULT,
    WORK_TASK_RESULTS,
    GoalStepExit,
    GoalStepRequest,
)


class DemoGoalAgent:
    """The demo agent for every goal step."""

    async def goal_step(self, request: GoalStepRequest) -> GoalStepExit:
        began = time.monotonic()
        knobs = request.demo
        folder = StepFolder(request.step_dir)
        folder.prepare()
        append_line(request.log_file, f"demo-{request.step}: iteration {request.iteration} started")
        if knobs.hang is not None and (knobs.hang.step, knobs.hang.iteration) == (
            request.step,
            request.iteration,
        ):
            await asyncio.Event().wait()  # ended only by the fleet's deadline or a cancel
        await asyncio.sleep(knobs.step_ms / 1000)
        if request.run_index <= knobs.voids.get(request.step, 0):
            return GoalStepExit(
                exit_code=1, void="demo: injected infrastructure fault", duration_ms=_ms(began)
            )
        if request.step == "plan":
            _plan(request, folder)
        elif request.step == "work":
            _work(request, folder)
        else:
            _review(request, folder)
        return GoalStepExit(duration_ms=_ms(began))


def _ms(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


def _plan(request: GoalStepRequest, folder: StepFolder) -> None:
    brief = request.brief
    lines = [f"# Iteration {request.iteration}: {brief.goal}", ""]
    if request.iteration in request.demo.invalid_todo:
        lines.append("Nothing is planned yet.")  # no checkbox item: the fleet refuses it
    else:
        titles = [*brief.remaining_work, *[f"work towards the goal, part {n}" for n in range(1, 51)]]
        for n, title in enumerate(titles[: request.demo.tasks], start=1):
            lines.append(f"- [ ] T{n}: {title}")
    write_atomic(folder.outputs / PLAN_OUTPUT, ("\n".join(lines) + "\n").encode(), durable=False)


def _work(request: GoalStepRequest, folder: StepFolder) -> None:
    try:
        tasks = parse_todo(request.inputs["todo"].read_text())
    except (OSError, KeyError, TodoError) as exc:
        result = WorkerResult(status="failed", summary=f"demo: cannot read the TODO: {exc}")
        write_atomic(folder.outputs / WORK_RESULT, result.model_dump_json().encode(), durable=False)
        return
    progress = folder.outputs / WORK_PROGRESS
    outcomes: list[dict[str, object]] = []
    for task in tasks:
        done = False
        attempt = 0
        for attempt in range(1, request.brief.attempts_per_task + 1):
            _progress(progress, task.id, "started", f"attempt {attempt}", attempt)
            if attempt > request.demo.task_failures:
                note = request.workspace_dir / "tasks" / f"{request.iteration:02d}-{task.id}.md"
                note.parent.mkdir(parents=True, exist_ok=True)
                note.write_text(f"# {task.title}\n\nDone in iteration {request.iteration}.\n")
                _progress(progress, task.id, "finished", f"wrote {note.name}", attempt)
                done = True
                break
            _progress(progress, task.id, "failed", "demo: the task failed", attempt)
        outcomes.append({"task": task.id, "status": "finished" if done else "failed", "attempts": attempt})
    finished = sum(1 for o in outcomes if o["status"] == "finished")
    status = "completed" if finished == len(tasks) else "partial" if finished else "failed"
    write_atomic(folder.outputs / WORK_TASK_RESULTS, json.dumps(outcomes, indent=2).encode(), durable=False)
    result = WorkerResult(
        status=status,
        summary=f"{finished} of {len(tasks)} tasks finished",
        task_results=WORK_TASK_RESULTS,
    )
    write_atomic(folder.outputs / WORK_RESULT, result.model_dump_json().encode(), durable=False)


def _progress(
    path: Path, task: str, event: Literal["started", "finished", "failed"], summary: str, attempt: int
) -> None:
    entry = ProgressEntry(task=task, event=event, summary=summary, attempt=attempt, at=datetime.now(UTC))
    append_line(path, entry.model_dump_json())


def _review(request: GoalStepRequest, folder: StepFolder) -> None:
    complete = request.iteration >= request.demo.complete_at
    remaining = [] if complete else [f"continue the goal in iteration {request.iteration + 1}"]
    review = Review(
        decision="complete" if complete else "continue",
        complete=complete,
        summary=f"demo review of iteration {request.iteration}",
        rationale=f"the demo reviewer completes the goal at iteration {request.demo.complete_at}",
        remaining_work=remaining,
    )
    write_atomic(folder.outputs / REVIEW_OUTPUT, review.model_dump_json().encode(), durable=False)
