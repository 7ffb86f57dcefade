"""The steps of a goal's iteration: each runs its agent in a fresh step folder, reads the agent's `out/`
files, validates them and records the result in the iteration (the state write is the step's commit
point: a step whose result is recorded is never run again). The work step (workers.kinds.goals.work) calls its
agent once per attempt at the tasks still open.

A void step (the agent was killed, could not start, or says so) is set aside as `<folder>.void-<n>` and
run again, up to `max_voids` in a row, after which the goal ends failed (workers.errors.VoidsExhausted).
What every agent call spends is counted however the call ends (workers.job_run, `metered`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from service.core.io.files import write_atomic
from service.core.io.trees import remove_tree
from service.core.models.events import EventKind
from service.core.validation import describe_validation
from service.kinds.goals.models import GoalStep
from service.kinds.goals.state import IterationState, PlanRecord, Review, ReviewRecord
from service.kinds.goals.store import CHANGES_FILE, PROGRESS_FILE, REVIEW_FILE, TODO_FILE, WORKER_RESULT_FILE
from service.kinds.goals.todo import TodoError, parse_todo
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import (
    PLAN_OUTPUT,
    PLAN_SUMMARY,
    REVIEW_OUTPUT,
    GoalBrief,
    GoalStepExit,
    GoalStepRequest,
    PlanSummary,
)
from workers.errors import VoidsExhausted
from workers.kinds.goals.outputs import read_output
from workers.kinds.goals.run import GoalRun

T = TypeVar("T")


class StepTimedOut(Exception):
    """The step's agent was still running at the step's deadline (it was ended)."""


class StepVoid(Exception):
    """The agent's call says nothing about the goal: the step is set aside and run again."""


class SandboxWasDown(Exception):
    """The agent's sandbox was down (the breaker has closed again since): the step starts afresh."""


def brief(goal_run: GoalRun, it: IterationState, step: GoalStep, attempt: int = 1) -> GoalBrief:
    earlier: list[dict[str, object]] = []
    remaining: list[str] = []
    for before in goal_run.state.iterations[: it.iteration - 1]:
        entry: dict[str, object] = {"iteration": before.iteration, "status": before.status}
        if before.error:
            entry["error"] = before.error
        if before.review is not None:
            review = before.review.review
            entry.update(decision=review.decision, summary=review.summary)
            remaining = list(review.remaining_work)
        earlier.append(entry)
    limits = goal_run.state.limits
    return GoalBrief(
        step=step,
        goal=goal_run.spec.goal,
        acceptance=goal_run.spec.acceptance,
        iteration=it.iteration,
        attempt=attempt,
        min_iterations=limits.min_iterations,
        max_iterations=limits.max_iterations,
        attempts_per_task=limits.attempts_per_task,
        remaining_work=remaining,
        earlier=earlier,
    )


async def fresh_attempts(
    goal_run: GoalRun, it: IterationState, step: GoalStep, body: Callable[[Path], Awaitable[T]]
) -> T:
    """`body` in a fresh step folder until none of its agent calls is void (a void one's folder is set
    aside); a sandbox found down on a tuning's goal waits for the breaker and starts the step afresh."""
    while True:
        step_dir = goal_run.step_dir(it.iteration, step)
        await remove_tree(step_dir)
        step_dir.mkdir(parents=True)
        try:
            return await body(step_dir)
        except StepVoid as void:
            await set_aside(goal_run, it, step, step_dir, str(void))
        except SandboxWasDown:
            continue


async def call_agent(
    goal_run: GoalRun,
    it: IterationState,
    step: GoalStep,
    step_dir: Path,
    workspace: Path,
    inputs: dict[str, Path],
    attempt: int = 1,
) -> GoalStepExit:
    """One call of the step's agent in `step_dir` (its `out/` emptied first), bounded by the step's
    deadline; what it spent counted in the goal. StepVoid when it says nothing, ProviderDown/KeyRefused
    when its provider failed, StepTimedOut at the deadline."""
    folder = StepFolder(step_dir)
    folder.prepare()
    given = {name: folder.give(source.name, source.read_bytes()) for name, source in inputs.items()}
    request = GoalStepRequest(
        goal_id=goal_run.spec.id,
        step=step,
        iteration=it.iteration,
        step_dir=step_dir,
        log_file=step_dir / f"{step}.log",
        brief=brief(goal_run, it, step, attempt),
        workspace_dir=workspace,
        system_dir=goal_run.system_dir,
        inputs=given,
        run_index=it.voids.get(step, 0) + 1,
        demo=goal_run.spec.demo,
    )
    try:
        with goal_run.metered({"iteration": it.iteration, "step": step}):
            async with asyncio.timeout_at(goal_run.step_deadline):
                exit_ = await goal_run.agent_for(step).goal_step(request)
    except TimeoutError:
        raise StepTimedOut(step) from None
    goal_run.step_ran = True
    stopped = exit_.provider_down or exit_.key_refused or exit_.sandbox_down or exit_.void
    if exit_.spent is not None:  # measured by the fleet's own adapter: counted whatever came of it
        goal_run.add_spend(it, step, exit_.spent)
        if stopped is None:
            goal_run.step_spent = goal_run.step_spent + exit_.spent  # with the step's `step_finished`
        else:
            goal_run.event(
                EventKind.SPEND_RECORDED, it, step, f"the {step} step stopped: {stopped}", spent=exit_.spent
            )
    exit_.raise_if_stopped(f"the goal {step} agent")
    if exit_.sandbox_down is not None:
        if goal_run.tuning is None:
            raise StepVoid(f"sandbox down: {exit_.sandbox_down}")
        await goal_run.breaker_watch.report_down(goal_run.tuning.name, exit_.sandbox_down)
        await goal_run.breaker_watch.runs.wait_open()
        raise SandboxWasDown(exit_.sandbox_down)
    if exit_.void is not None:
        raise StepVoid(exit_.void)
    return exit_


async def set_aside(goal_run: GoalRun, it: IterationState, step: GoalStep, step_dir: Path, why: str) -> None:
    count = it.voids.get(step, 0) + 1
    await goal_run.lease.check()
    step_dir.rename(step_dir.with_name(f"{step_dir.name}.void-{count}"))
    it.voids[step] = count
    goal_run.event(EventKind.STEP_SET_ASIDE, it, step, f"void: {why}", data={"voids": count})
    await goal_run.persist()
    in_a_row = count - it.voids_counted.get(step, 0)
    if in_a_row >= goal_run.state.limits.max_voids:
        raise VoidsExhausted(f"{in_a_row} void {step} steps in a row, the last: {why}")


def exit_words(exit_: GoalStepExit) -> str:
    return f" (the agent {exit_.error})" if exit_.error else ""


def finished(
    goal_run: GoalRun, it: IterationState, step: GoalStep, began: float, detail: str, **data: object
) -> int:
    """The step's `step_finished` event (`data`: its outcome), with its duration and what its agent
    calls spent; the duration in ms."""
    duration_ms = ms(began)
    spent = goal_run.step_spent if goal_run.step_spent.tokens or goal_run.step_spent.cost_usd else None
    goal_run.event(EventKind.STEP_FINISHED, it, step, detail, duration_ms=duration_ms, spent=spent, data=data)
    return duration_ms


async def plan(goal_run: GoalRun, it: IterationState) -> None:
    """Plan: a valid TODO moves the iteration to work; an invalid one fails it, naming the problem."""
    began = time.monotonic()
    snapshot = await goal_run.workspace.snapshot(it.workspace_base or "")

    async def once(step_dir: Path) -> GoalStepExit:
        return await call_agent(goal_run, it, "plan", step_dir, snapshot, {})

    exit_ = await fresh_attempts(goal_run, it, "plan", once)
    outputs = StepFolder(goal_run.step_dir(it.iteration, "plan")).outputs
    folder_iteration = goal_run.store.iteration_dir(it.iteration)
    try:
        text = read_output(outputs / PLAN_OUTPUT)
        if text is None:
            raise TodoError(f"the planner wrote no {PLAN_OUTPUT}{exit_words(exit_)}")
        tasks = parse_todo(text)
    except (TodoError, ValueError) as exc:
        it.plan = PlanRecord(error=str(exc), duration_ms=ms(began))
        await failed_iteration(goal_run, it, "plan", f"invalid TODO: {exc}")
        return
    await goal_run.lease.check()
    write_atomic(folder_iteration / TODO_FILE, text.encode())
    duration_ms = finished(
        goal_run, it, "plan", began, f"{len(tasks)} tasks", outcome="planned", tasks=len(tasks)
    )
    it.plan = PlanRecord(tasks=tasks, summary=plan_summary(outputs / PLAN_SUMMARY), duration_ms=duration_ms)
    it.status = "working"
    await goal_run.persist()


def plan_summary(path: Path) -> str | None:
    """The planner's optional `out/plan.json` summary (one it got wrong is left out, not an error)."""
    try:
        text = read_output(path)
        return PlanSummary.model_validate_json(text).summary if text is not None else None
    except ValueError:
        return None


async def review(goal_run: GoalRun, it: IterationState) -> None:
    """Review the iteration; an invalid review fails the iteration (the next one plans again)."""
    began = time.monotonic()
    folder_iteration = goal_run.store.iteration_dir(it.iteration)
    inputs = {
        "todo": folder_iteration / TODO_FILE,
        "progress": folder_iteration / PROGRESS_FILE,
        "worker_result": folder_iteration / WORKER_RESULT_FILE,
        "changes": folder_iteration / CHANGES_FILE,
    }
    snapshot = await goal_run.workspace.snapshot(goal_run.state.workspace or "")

    async def once(step_dir: Path) -> GoalStepExit:
        return await call_agent(goal_run, it, "review", step_dir, snapshot, inputs)

    exit_ = await fresh_attempts(goal_run, it, "review", once)
    outputs = StepFolder(goal_run.step_dir(it.iteration, "review")).outputs
    try:
        text = read_output(outputs / REVIEW_OUTPUT)
        if text is None:
            raise ValueError(f"the reviewer wrote no {REVIEW_OUTPUT}{exit_words(exit_)}")
        verdict = Review.model_validate_json(text)
    except ValueError as exc:
        why = describe_validation(exc) if isinstance(exc, ValidationError) else str(exc)
        await failed_iteration(goal_run, it, "review", f"invalid review: {why}")
        return
    await goal_run.lease.check()
    write_atomic(folder_iteration / REVIEW_FILE, verdict.model_dump_json(indent=2).encode())
    outcome = "complete" if verdict.complete else "continue"
    duration_ms = finished(goal_run, it, "review", began, verdict.decision, outcome=outcome)
    it.review = ReviewRecord(review=verdict, duration_ms=duration_ms)
    it.status = "reviewed"
    await goal_run.persist()


INVALID_OUTPUT = {"plan": EventKind.PLAN_INVALID, "review": EventKind.REVIEW_INVALID}
"""The event of a step whose output the fleet refused."""


async def failed_iteration(goal_run: GoalRun, it: IterationState, step: GoalStep, error: str) -> None:
    """The iteration fails because its step's output was invalid (`error` says how): the next one plans
    again."""
    it.status = "failed"
    it.error = error
    goal_run.event(INVALID_OUTPUT[step], it, step, error)
    await goal_run.persist()


def ms(began: float) -> int:
    return int((time.monotonic() - began) * 1000)
