"""`GOAL_RESULT.md`: a goal's account for people, begun with its limits, one section per iteration.

Rendered whole from the state at every change (and written atomically), so a worker that resumes a
goal never repeats or loses a section, whatever step it was killed in.
"""

from __future__ import annotations

from pathlib import Path

from service.core.models.goal_state import Completion, GoalState, IterationState


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
        lines += ["", *_iteration(iteration, root)]
    if state.completion is not None:
        lines += ["", *_completion("## Outcome", state.completion)]
    return "\n".join(lines) + "\n"


def _iteration(it: IterationState, root: Path) -> list[str]:
    folder = root / "iterations" / f"{it.iteration:02d}"
    lines = [
        f"## Iteration {it.iteration}",
        "",
        f"Status: {it.status}",
        f"Started: {it.started_at.isoformat()}",
        f"Deadline: {it.deadline_at.isoformat()}",
    ]
    if it.error:
        lines.append(f"Error: {it.error}")
    if it.plan is not None and it.plan.error is None:
        lines += ["", "### TODO", "", f"Path: {folder / 'TODO.md'}"]
        lines += [f"- [{'x' if t.done else ' '}] {t.id}: {t.title}" for t in it.plan.tasks]
    if it.work is not None:
        r = it.work.result
        lines += [
            "",
            "### Worker result",
            "",
            f"Status: {r.status}",
            f"Summary: {r.summary}",
            f"Tasks finished: {it.work.tasks_finished}, failed: {it.work.tasks_failed}",
            f"Progress log: {folder / 'WORKER_PROGRESS.jsonl'}",
        ]
        if r.task_results:
            lines.append(f"Task results: {folder / r.task_results}")
    if it.review is not None:
        v = it.review.review
        lines += [
            "",
            "### Review",
            "",
            f"Decision: {v.decision}",
            f"Complete: {'yes' if v.complete else 'no'}",
            f"Summary: {v.summary}",
            f"Rationale: {v.rationale}",
        ]
        if v.remaining_work:
            lines += ["", "Remaining work:", *[f"- {item}" for item in v.remaining_work]]
    if it.completion is not None:
        lines += ["", *_completion("### Completion", it.completion)]
    return lines


def _completion(heading: str, completion: Completion) -> list[str]:
    lines = [heading, "", f"Status: {completion.status}", f"Reason: {completion.reason}"]
    return [*lines, f"Limit: {completion.limit}"] if completion.limit else lines
