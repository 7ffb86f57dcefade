"""A goal's loop: iterations of plan, work and review under the goal's limits, until a review completes
it (from `min_iterations` on), a limit ends it `incomplete`, its steps stay void (`failed`) or it is
cancelled.

Every step reads where the goal stands from its state and records its result there before the next
starts, so calling `pursue` again after any interruption carries on at the first missing step. Before a
step starts: a cancel found in the state ends the goal, a paused fleet, a held tuning or an open breaker
hold the start (workers.job_run), and a goal on a tuning that spent the tuning's per-job budget ends
`incomplete` (limit `budget`).

Deadlines are wall-clock times kept in the state: the run's from its first start, each iteration's from
its own start. A step may run until the sooner of the two (never less than 1 s); a review also no
longer than `reviewer_timeout_s`. A step still running at its deadline is cancelled (its agent's
processes are ended) and the goal ends `incomplete`, naming the limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from service.core.models.events import EventKind
from service.core.models.records import Usage
from service.core.models.status import Hold, WaitCause
from service.kinds.goals.models import FINAL_STATUSES, GoalStep, Limit
from service.kinds.goals.state import Completion, GoalState, IterationState
from workers.errors import OverBudget
from workers.kinds.goals import steps
from workers.kinds.goals.run import STEP_OF, GoalRun
from workers.kinds.goals.work import work

STEPS: dict[GoalStep, Callable[[GoalRun, IterationState], Awaitable[None]]] = {
    "plan": steps.plan,
    "work": work,
    "review": steps.review,
}
LIMIT_WORDS: dict[str, str] = {
    "timeout": "run timeout",
    "iteration_timeout": "iteration timeout",
    "reviewer_timeout": "reviewer timeout",
}
MIN_STEP_S = 1.0
STEP_WAITS: dict[WaitCause, EventKind] = {
    "resume": EventKind.STEP_WAITS_FOR_RESUME,
    "hold": EventKind.STEP_WAITS_FOR_HOLD,
    "sandbox": EventKind.STEP_WAITS_FOR_SANDBOX,
}


async def pursue(goal_run: GoalRun) -> GoalState:
    """Run the goal to its end (or return the state it ended with)."""
    state = goal_run.state
    while state.status not in FINAL_STATUSES:
        it = state.current()
        if it is None or it.status in ("reviewed", "failed"):
            if not await _ends_after(goal_run, it):
                await _begin_iteration(goal_run)
            continue
        step = STEP_OF[it.status]
        if goal_run.cancel_requested:
            await end(goal_run, "cancelled", f"cancelled by the user before the {step} step")
            break
        await _wait_runnable(goal_run, it, step)
        try:
            check_budget(goal_run)
        except OverBudget as over:
            await end(goal_run, "incomplete", over.reason, "budget")
            break
        budget_s, limit = step_budget(state, it, step)
        if budget_s <= 0:
            await end(
                goal_run, "incomplete", f"the {LIMIT_WORDS[limit]} passed before the {step} step", limit
            )
            break
        goal_run.step, goal_run.step_spent = step, Usage()
        goal_run.event(EventKind.STEP_STARTED, it, step)
        await goal_run.persist()
        goal_run.step_deadline = asyncio.get_running_loop().time() + max(MIN_STEP_S, budget_s)
        try:
            await STEPS[step](goal_run, it)
        except steps.StepTimedOut:
            await end(
                goal_run,
                "incomplete",
                f"the {step} step of iteration {it.iteration} ran into the {LIMIT_WORDS[limit]} "
                f"({max(MIN_STEP_S, budget_s):.0f} s left when it started)",
                limit,
            )
        goal_run.step = None  # not on a cancel: the job names the step the goal was cancelled in
    return state


def step_budget(state: GoalState, it: IterationState, step: GoalStep) -> tuple[float, Limit]:
    """How long the step may run, and the limit that bounds it."""
    now = datetime.now(UTC)
    run_s = (state.deadline_at - now).total_seconds()
    iteration_s = (it.deadline_at - now).total_seconds()
    limit: Limit = "timeout" if run_s <= iteration_s else "iteration_timeout"
    budget_s = min(run_s, iteration_s)
    if step == "review" and state.limits.reviewer_timeout_s < budget_s:
        return state.limits.reviewer_timeout_s, "reviewer_timeout"
    return budget_s, limit


async def _ends_after(goal_run: GoalRun, it: IterationState | None) -> bool:
    """Whether the goal ends after iteration `it` (ended with its reason if so)."""
    if it is None:
        return False
    limits = goal_run.state.limits
    if it.status == "reviewed" and it.review is not None and it.review.review.complete:
        if it.iteration >= limits.min_iterations:
            await end(
                goal_run, "completed", f"the review of iteration {it.iteration}: {it.review.review.summary}"
            )
            return True
        goal_run.event(
            EventKind.REVIEW_COMPLETE_TOO_EARLY,
            it,
            "review",
            f"iteration {it.iteration} of at least {limits.min_iterations}: the goal goes on",
        )
    if it.iteration >= limits.max_iterations:
        await end(
            goal_run,
            "incomplete",
            f"{it.iteration} iterations (max_iterations) without a review that completes the goal",
            "max_iterations",
        )
        return True
    if datetime.now(UTC) >= goal_run.state.deadline_at:
        await end(goal_run, "incomplete", "the run timeout passed", "timeout")
        return True
    return False


async def _begin_iteration(goal_run: GoalRun) -> None:
    now = datetime.now(UTC)
    it = IterationState(
        iteration=len(goal_run.state.iterations) + 1,
        started_at=now,
        updated_at=now,
        deadline_at=now + timedelta(seconds=goal_run.state.limits.iteration_timeout_s),
        workspace_base=goal_run.state.workspace,
    )
    goal_run.state.iterations.append(it)
    goal_run.event(EventKind.ITERATION_STARTED, it)
    await goal_run.persist()


async def _wait_runnable(goal_run: GoalRun, it: IterationState, step: GoalStep) -> None:
    """Hold the step's start while the fleet is paused, the goal's tuning held or the breaker open."""

    async def announce(cause: WaitCause, hold: Hold | None) -> None:
        goal_run.step = step  # shown as the goal's step while it waits
        data = {"kind": hold.kind} if hold is not None else {}
        goal_run.event(STEP_WAITS[cause], it, step, hold.reason if hold else None, data=data)
        await goal_run.persist()

    await goal_run.wait_runnable(announce)


def check_budget(goal_run: GoalRun) -> None:
    """OverBudget when the goal has spent its tuning's per-job budget (`case_max_*`: no tuning, no
    budget)."""
    if goal_run.tuning is None:
        return
    budget = goal_run.tuning.current_budget()
    reason = budget.case_over(goal_run.state.spent.tokens, goal_run.state.spent.cost_usd)
    if reason is not None:
        raise OverBudget(reason)


async def end(goal_run: GoalRun, status: str, reason: str, limit: Limit | None = None) -> None:
    """End the goal with its reason (and the limit it reached), durably, before anything else happens."""
    completion = Completion.model_validate(
        {"status": status, "reason": reason, "limit": limit, "at": datetime.now(UTC)}
    )
    goal_run.state.finish(completion, goal_run.worker)
    goal_run.step = None
    await goal_run.persist()
