"""`GOAL_RESULT.md`: a goal's account for people, begun with its limits, one section per iteration.

Rendered whole from the state at every change (and written atomically), so a worker that resumes a
goal never repeats or loses a section, whatever step it was killed in.
"""

from __future__ import annotations

from pathlib import Path

from service.kinds.goals.models import GoalLimits
from service.kinds.goals.state import (
    Completion,
    GoalState,
    IterationState,
    PlanRecord,
    Review,
    WorkRecord,
)


def render_result(state: GoalState, root: Path) -> str:
    limits = state.limits
    lines = [
        f"# Goal {state.goal_id}",
        "",
        f"Goal: {state.goal}",
        f"Status: {state.status}",
        f"Started: {state.started_at.isoformat()}",
        f"Deadline: {state.deadline_at.isoformat()}",
    ]
    if state.spent.tokens or state.spent.cost_usd:
        lines.append(f"Spent: {state.spent.tokens} tokens, ${state.spent.cost_usd:.4f}")
    if state.tuning:
        lines.append(f"Tuning: {state.tuning} (system version {state.version})")
    lines += [
        f"Spec: {root / 'GOAL_SPEC.json'}",
        f"State: {root / 'GOAL_STATE.json'}",
        f"Trace: {root / 'GOAL_TRACE.jsonl'}",
        "",
        "## Limits",
        "",
        f"- Minimum iterations before completion: {limits.min_iterations}",
        f"- Maximum iterations: {limits.max_iterations}",
        f"- Run timeout: {limits.timeout_s:g} s",
        f"- Iteration timeout: {limits.iteration_timeout_s:g} s",
        f"- Reviewer timeout: {limits.reviewer_timeout_s:g} s",
        f"- Attempts per task: {limits.attempts_per_task}",
    ]
    for iteration in state.iterations:
        lines += ["", *_iteration(iteration, root, limits)]
    if state.completion is not None:
        lines += ["", *_completion("## Outcome", state.completion)]
    return "\n".join(lines) + "\n"


def _iteration(it: IterationState, root: Path, limits: GoalLimits) -> list[str]:
    folder = root / "iterations" / f"{it.iteration:02d}"
    lines = [
        f"## Iteration {it.iteration}",
        "",
        f"Status: {it.status}",
        f"Started: {it.started_at.isoformat()}",
        f"Updated: {it.updated_at.isoformat()}",
        f"Deadline: {it.deadline_at.isoformat()}",
    ]
    if it.error:
        lines.append(f"Error: {it.error}")
    if it.plan is not None and it.plan.error is None:
        lines += _todo(it.plan, folder)
    if it.work is not None:
        lines += _work(it.work, folder, limits)
    if it.review is not None:
        lines += _review(it.review.review)
    if it.completion is not None:
        lines += ["", *_completion("### Completion", it.completion)]
    return lines


def _todo(plan: PlanRecord, folder: Path) -> list[str]:
    summary = [f"Summary: {plan.summary}"] if plan.summary else []
    tasks = [f"- [{'x' if t.done else ' '}] {t.id}: {t.title}" for t in plan.tasks]
    return _section("TODO", f"Path: {folder / 'TODO.md'}", *summary, *tasks)


def _work(work: WorkRecord, folder: Path, limits: GoalLimits) -> list[str]:
    r = work.result
    lines = _section(
        "Worker result",
        f"Status: {r.status}",
        f"Summary: {r.summary}",
        f"Tasks finished: {work.tasks_finished}, failed: {work.tasks_failed} "
        f"(attempts: {work.attempts} of {limits.attempts_per_task})",
        f"Progress log: {folder / 'WORKER_PROGRESS.jsonl'}",
    )
    if r.task_results:
        lines.append(f"Task results: {folder / r.task_results}")
    if work.error:
        lines.append(f"Error: {work.error}")
    return lines


def _review(v: Review) -> list[str]:
    remaining = (
        ["", "Remaining work:", *[f"- {item}" for item in v.remaining_work]] if v.remaining_work else []
    )
    return _section(
        "Review",
        f"Decision: {v.decision}",
        f"Complete: {'yes' if v.complete else 'no'}",
        f"Summary: {v.summary}",
        f"Rationale: {v.rationale}",
        *remaining,
    )


def _section(title: str, *lines: str) -> list[str]:
    """An iteration's section: a blank line, its `###` heading, a blank line, its lines."""
    return ["", f"### {title}", "", *lines]


def _completion(heading: str, completion: Completion) -> list[str]:
    lines = [heading, "", f"Status: {completion.status}", f"Reason: {completion.reason}"]
    return [*lines, f"Limit: {completion.limit}"] if completion.limit else lines
