"""The three steps of a goal's iteration: each runs its agent in a fresh step folder, reads the agent's
`out/` files, validates them and records the result in the iteration (the state write is the step's
commit point: a step whose result is recorded is never run again).

A void step (the agent was killed, could not start, or says so) is set aside as `<folder>.void-<n>` and
run again, up to `max_voids` in a row, after which the goal ends failed.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from service.core.errors import SystemRepoError
from service.core.files import describe_validation, write_atomic
from service.core.models.goal import GoalStep
from service.core.models.goal_state import (
    IterationState,
    PlanRecord,
    Review,
    ReviewRecord,
    WorkerResult,
    WorkRecord,
)
from service.goals.store import (
    CHANGES_FILE,
    PROGRESS_FILE,
    REVIEW_FILE,
    TASK_RESULTS_FILE,
    TODO_FILE,
    WORKER_RESULT_FILE,
)
from service.goals.todo import TodoError, parse_todo
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import (
    PLAN_OUTPUT,
    REVIEW_OUTPUT,
    WORK_PROGRESS,
    WORK_TASK_RESULTS,
    GoalBrief,
    GoalStepExit,
    GoalStepRequest,
)
from workers.errors import KeyRefused, ProviderDown
from workers.goals.outputs import progress_entries, read_or_none, read_output, worker_result
from workers.goals.run import GoalRun


class GoalVoidsExhausted(Exception):
    """A step was void `max_voids` times in a row: the goal ends failed."""


class StepTimedOut(Exception):
    """The step's agent was still running at the step's deadline (it was ended)."""


@dataclass(frozen=True)
class Ran:
    """A step's agent ran (not void): its folder and how it ended."""

    folder: StepFolder
    exit: GoalStepExit


def brief(gr: GoalRun, it: IterationState, step: GoalStep) -> GoalBrief:
    earlier: list[dict[str, object]] = []
    remaining: list[str] = []
    for before in gr.state.iterations[: it.iteration - 1]:
        entry: dict[str, object] = {"iteration": before.iteration, "status": before.status}
        if before.error:
            entry["error"] = before.error
        if before.review is not None:
            review = before.review.review
            entry.update(decision=review.decision, summary=review.summary)
            remaining = list(review.remaining_work)
        earlier.append(entry)
    limits = gr.state.limits
    return GoalBrief(
        step=step,
        goal=gr.spec.goal,
        acceptance=gr.spec.acceptance,
        iteration=it.iteration,
        min_iterations=limits.min_iterations,
        max_iterations=limits.max_iterations,
        attempts_per_task=limits.attempts_per_task,
        remaining_work=remaining,
        earlier=earlier,
    )


async def run_agent(
    gr: GoalRun, it: IterationState, step: GoalStep, workspace: Path, inputs: dict[str, Path]
) -> Ran:
    """Run the step's agent until a run is not void; ProviderDown/KeyRefused when its provider failed."""
    while True:
        step_dir = gr.step_dir(it.iteration, step)
        shutil.rmtree(step_dir, ignore_errors=True)
        folder = StepFolder(step_dir)
        folder.prepare()
        given = {}
        for name, source in inputs.items():
            given[name] = folder.inputs / source.name
            shutil.copyfile(source, given[name])
        request = GoalStepRequest(
            goal_id=gr.spec.id,
            step=step,
            iteration=it.iteration,
            step_dir=step_dir,
            log_file=step_dir / f"{step}.log",
            brief=brief(gr, it, step),
            workspace_dir=workspace,
            system_dir=gr.system_dir,
            inputs=given,
            run_index=it.voids.get(step, 0) + 1,
            demo=gr.spec.demo,
        )
        if step == "work":
            # the workspace copy is the agent's: it lives in the step folder, made fresh above
            await gr.workspace.private_copy(it.workspace_base or "", workspace)
        try:
            async with asyncio.timeout_at(gr.step_deadline):
                exit_ = await gr.agent_for(step).goal_step(request)
        except TimeoutError:
            raise StepTimedOut(step) from None
        if exit_.spent is not None:  # measured by the fleet's own adapter: counted whatever came of it
            it.spent = it.spent + exit_.spent
            gr.state.spent = gr.state.spent + exit_.spent
        if exit_.provider_down is not None:
            raise ProviderDown(f"the goal {step} agent's {exit_.provider_down}")
        if exit_.key_refused is not None:
            raise KeyRefused(f"the goal {step} agent's {exit_.key_refused}")
        void = exit_.void
        if exit_.sandbox_down is not None:
            if gr.state.tuning is not None:
                await gr.gate.report_down(gr.state.tuning, exit_.sandbox_down)
                await gr.gate.wait_closed()
                continue
            void = f"sandbox down: {exit_.sandbox_down}"
        if void is None:
            return Ran(folder, exit_)
        await set_aside(gr, it, step, step_dir, void)


async def set_aside(gr: GoalRun, it: IterationState, step: GoalStep, step_dir: Path, why: str) -> None:
    count = it.voids.get(step, 0) + 1
    await gr.lease.check()
    step_dir.rename(step_dir.with_name(f"{step_dir.name}.void-{count}"))
    it.voids[step] = count
    gr.event("step_set_aside", it, step, f"void: {why}", voids=count)
    await gr.persist()
    in_a_row = count - it.voids_counted.get(step, 0)
    if in_a_row >= gr.state.limits.max_voids:
        raise GoalVoidsExhausted(f"{in_a_row} void {step} steps in a row, the last: {why}")


def _exit_words(exit_: GoalStepExit) -> str:
    return f" (the agent {exit_.error})" if exit_.error else ""


async def plan(gr: GoalRun, it: IterationState) -> None:
    """Plan: a valid TODO moves the iteration to work; an invalid one fails it, naming the problem."""
    began = time.monotonic()
    snapshot = await gr.workspace.snapshot(it.workspace_base or "")
    ran = await run_agent(gr, it, "plan", snapshot, {})
    folder_iteration = gr.store.iteration_dir(it.iteration)
    try:
        text = read_output(ran.folder.outputs / PLAN_OUTPUT)
        if text is None:
            raise TodoError(f"the planner wrote no {PLAN_OUTPUT}{_exit_words(ran.exit)}")
        tasks = parse_todo(text)
    except (TodoError, ValueError) as exc:
        it.plan = PlanRecord(error=str(exc), duration_ms=_ms(began))
        it.status = "failed"
        it.error = f"invalid TODO: {exc}"
        gr.event("plan_invalid", it, "plan", it.error)
        await gr.persist()
        return
    await gr.lease.check()
    write_atomic(folder_iteration / TODO_FILE, text.encode())
    it.plan = PlanRecord(tasks=tasks, duration_ms=_ms(began))
    it.status = "working"
    gr.event("step_finished", it, "plan", f"{len(tasks)} tasks", outcome="planned", tasks=len(tasks))
    await gr.persist()


async def work(gr: GoalRun, it: IterationState) -> None:
    """Work the TODO in a private copy of the workspace; commit what it changed."""
    began = time.monotonic()
    folder_iteration = gr.store.iteration_dir(it.iteration)
    workspace = gr.step_dir(it.iteration, "work") / "workspace"
    ran = await run_agent(gr, it, "work", workspace, {"todo": folder_iteration / TODO_FILE})
    result = worker_result(ran.folder, _exit_words(ran.exit))
    progress_text = read_or_none(ran.folder.outputs / WORK_PROGRESS) or ""
    entries = progress_entries(progress_text)
    last = {entry.task: entry.event for entry in entries}
    base = it.workspace_base or ""
    try:
        message = f"goal {gr.spec.id}: iteration {it.iteration}"
        after = await gr.workspace.commit_folder(workspace, base, message) or base
    except SystemRepoError as exc:  # a nested repository, a link out of the workspace: the work's fault
        after = base
        result = WorkerResult(status="failed", summary=f"the workspace could not be recorded: {exc}")
    changes = await gr.workspace.diff(base, after)
    await gr.lease.check()
    write_atomic(folder_iteration / PROGRESS_FILE, progress_text.encode())
    write_atomic(folder_iteration / CHANGES_FILE, changes.encode())
    task_results = read_or_none(ran.folder.outputs / WORK_TASK_RESULTS)
    if task_results is not None:
        write_atomic(folder_iteration / TASK_RESULTS_FILE, task_results.encode())
        result = result.model_copy(update={"task_results": TASK_RESULTS_FILE})
    else:
        result = result.model_copy(update={"task_results": None})
    write_atomic(folder_iteration / WORKER_RESULT_FILE, result.model_dump_json(indent=2).encode())
    it.work = WorkRecord(
        result=result,
        tasks_finished=sum(1 for event in last.values() if event == "finished"),
        tasks_failed=sum(1 for event in last.values() if event == "failed"),
        workspace_before=base,
        workspace_after=after,
        duration_ms=_ms(began),
    )
    gr.state.workspace = after
    it.status = "reviewing"
    gr.event("step_finished", it, "work", result.summary, outcome=result.status)
    await gr.persist()


async def review(gr: GoalRun, it: IterationState) -> None:
    """Review the iteration; an invalid review fails the iteration (the next one plans again)."""
    began = time.monotonic()
    folder_iteration = gr.store.iteration_dir(it.iteration)
    inputs = {
        "todo": folder_iteration / TODO_FILE,
        "progress": folder_iteration / PROGRESS_FILE,
        "worker_result": folder_iteration / WORKER_RESULT_FILE,
        "changes": folder_iteration / CHANGES_FILE,
    }
    snapshot = await gr.workspace.snapshot(gr.state.workspace or "")
    ran = await run_agent(gr, it, "review", snapshot, inputs)
    try:
        text = read_output(ran.folder.outputs / REVIEW_OUTPUT)
        if text is None:
            raise ValueError(f"the reviewer wrote no {REVIEW_OUTPUT}{_exit_words(ran.exit)}")
        verdict = Review.model_validate_json(text)
    except ValueError as exc:
        why = describe_validation(exc) if isinstance(exc, ValidationError) else str(exc)
        it.status = "failed"
        it.error = f"invalid review: {why}"
        gr.event("review_invalid", it, "review", it.error)
        await gr.persist()
        return
    await gr.lease.check()
    write_atomic(folder_iteration / REVIEW_FILE, verdict.model_dump_json(indent=2).encode())
    it.review = ReviewRecord(review=verdict, duration_ms=_ms(began))
    it.status = "reviewed"
    gr.event(
        "step_finished",
        it,
        "review",
        verdict.decision,
        outcome="complete" if verdict.complete else "continue",
    )
    await gr.persist()


def _ms(began: float) -> int:
    return int((time.monotonic() - began) * 1000)
