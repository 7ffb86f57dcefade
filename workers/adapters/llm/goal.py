"""Goal steps for `kind: llm`: the planner, the reviewer and a tool-less worker, each one prompt (with
one repair round) to a model behind an OpenAI-compatible Chat Completions API.

    plan     prompts/plan.md, a plain-text answer: the TODO in Markdown   -> out/TODO.md
    review   prompts/review.md, JSON of the Review schema                 -> out/review.json
    work     prompts/work.md, JSON of WorkAnswer (per task: finished or failed, with a summary)
                 -> out/worker_result.json, out/progress.jsonl, out/task_results.json

The worker has no tools (as the llm runner of a case): it changes nothing in the workspace and says,
per task, what it did or would do; a goal that must change files wants a `command` runner.

An answer that does not validate (a TODO the fleet would refuse, a review or work answer that is not
its schema) is sent back once with the problem named; if the second answer fails too it is written
as it is, so the fleet records the iteration's failure with the same words. The provider down
through its retries is `provider_down` (the goal is handed back), a refused key `key_refused`, a
missing key variable a void step; every exit carries what the calls cost (`spent`).
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.core.io.files import append_line, write_atomic
from service.core.models.tuning import LlmAdapter
from service.core.validation import describe_validation
from service.kinds.goals.models import GOAL_STEPS, GoalStep
from service.kinds.goals.state import ProgressEntry, Review, WorkerResult
from service.kinds.goals.todo import TodoError, parse_todo
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
from workers.adapters.llm.errors import LlmStepError
from workers.adapters.llm.formats import AnswerSchema
from workers.adapters.llm.goal_prompts import goal_values, load_goal_template
from workers.adapters.llm.pool import Providers, borrowed
from workers.adapters.llm.provider import Provider, check_limits
from workers.adapters.llm.session import Message, Session, json_answer, strip_fences

REPAIR = "Your answer is not valid: {problem}\nAnswer again with the whole corrected {what} and nothing else."


class TaskOutcome(BaseModel):
    """One TODO task as the worker model reports it."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="The task's id in the TODO.")
    status: Literal["finished", "failed"]
    summary: str = Field(max_length=5_000)


class WorkAnswer(BaseModel):
    """What the worker model answers: the worker result and one outcome per task."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "partial", "failed"]
    summary: str = Field(max_length=20_000)
    tasks: list[TaskOutcome] = Field(max_length=200)


def check_todo(answer: str) -> str:
    """What is wrong with a TODO answer ('' when the fleet will take it)."""
    try:
        parse_todo(strip_fences(answer))
    except TodoError as exc:
        return str(exc)
    return ""


def check_model(model: type[BaseModel]) -> Callable[[str], str]:
    """A check of answers against `model` ('' when one validates)."""

    def check(answer: str) -> str:
        try:
            model.model_validate_json(json_answer(answer))
        except ValidationError as exc:
            return describe_validation(exc)
        return ""

    return check


def _ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


class LlmGoalAgent:
    """One llm adapter taking the goal steps of its role (any step it is asked: the loop asks the
    analyzer's agent to plan and review and the runner's to work)."""

    trusted = True

    def __init__(self, config: LlmAdapter, providers: Providers | None = None) -> None:
        check_limits(config, providers.redis if providers is not None else None)
        self._config = config
        self._providers = providers
        self._templates: dict[GoalStep, string.Template] = {s: load_goal_template(s) for s in GOAL_STEPS}
        self._answers = {
            "review": AnswerSchema("review", Review.model_json_schema()),
            "work": AnswerSchema("work", WorkAnswer.model_json_schema()),
        }
        self.source = f"llm goal agent {config.model}"

    async def goal_step(self, request: GoalStepRequest) -> GoalStepExit:
        started = time.monotonic()
        folder = StepFolder.ready(request.step_dir)
        session: Session | None = None
        try:
            async with borrowed(self._providers) as pool:
                session = self._session(request, pool.get(self._config))
                error = await self._step(request, session, folder)
        except LlmStepError as exc:
            return self._failed(request, started, session, **{exc.ends_as: str(exc)})
        return GoalStepExit(
            exit_code=0 if error is None else 1,
            duration_ms=_ms(started),
            error=error,
            spent=session.meter.usage(),
        )

    def _session(self, request: GoalStepRequest, provider: Provider) -> Session:
        config, step_dir, log_file = self._config, request.step_dir, request.log_file
        answer = None if request.step == "plan" else self._answers[request.step]
        return Session(config, provider, step_dir, log_file, answer)

    def _failed(
        self, request: GoalStepRequest, started: float, session: Session | None, **why: str
    ) -> GoalStepExit:
        append_line(request.log_file, f"llm: no {request.step} step: {next(iter(why.values()))}")
        spent = session.meter.usage() if session is not None else None
        return GoalStepExit(exit_code=1, duration_ms=_ms(started), spent=spent, **why)

    async def _step(self, request: GoalStepRequest, session: Session, folder: StepFolder) -> str | None:
        """Ask, repair once, write the step's `out/` files; the step's error if the answer stayed invalid."""
        step = request.step
        schema = session.answer.quoted if session.answer is not None else ""
        prompt = self._templates[step].substitute(goal_values(request, schema))
        check: Callable[[str], str] = check_todo
        what = "TODO in Markdown"
        if step != "plan":
            check, what = check_model(Review if step == "review" else WorkAnswer), "JSON object"
        messages: list[Message] = [{"role": "user", "content": prompt}]
        answer = await session.ask(messages)
        problem = check(answer)
        if problem:
            session.say(f"the {step} answer is not valid ({problem}): one repair round")
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": REPAIR.format(problem=problem, what=what)},
            ]
            answer = await session.ask(messages)
            problem = check(answer)
        text = strip_fences(answer) if step == "plan" else json_answer(answer)
        if step == "plan":
            write_atomic(folder.outputs / PLAN_OUTPUT, (text + "\n").encode(), durable=False)
        elif step == "review" or problem:
            name = REVIEW_OUTPUT if step == "review" else WORK_RESULT
            write_atomic(folder.outputs / name, text.encode(), durable=False)
        else:
            write_work(folder, WorkAnswer.model_validate_json(text))
        if problem:
            session.say(f"the repaired {step} answer is not valid either ({problem})")
            return f"its {step} answer did not validate after one repair round: {problem}"
        return None


def write_work(folder: StepFolder, answer: WorkAnswer) -> None:
    """The worker's files from its answer: the result, a progress line per task, the task results."""
    now = datetime.now(UTC)
    lines = []
    for outcome in answer.tasks:
        started = ProgressEntry(task=outcome.task, event="started", summary=outcome.summary, at=now)
        ended = ProgressEntry(task=outcome.task, event=outcome.status, summary=outcome.summary, at=now)
        lines += [started.model_dump_json() + "\n", ended.model_dump_json() + "\n"]
    write_atomic(folder.outputs / WORK_PROGRESS, "".join(lines).encode(), durable=False)
    results = [outcome.model_dump() for outcome in answer.tasks]
    write_atomic(folder.outputs / WORK_TASK_RESULTS, json.dumps(results, indent=2).encode(), durable=False)
    result = WorkerResult(status=answer.status, summary=answer.summary, task_results=WORK_TASK_RESULTS)
    write_atomic(folder.outputs / WORK_RESULT, result.model_dump_json(indent=2).encode(), durable=False)
