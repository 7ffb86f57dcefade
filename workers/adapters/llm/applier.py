"""The applier as a model behind an OpenAI-compatible Chat Completions API: it answers edits, which
the applier makes in the worktree (the fleet commits the folder afterwards)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from service.core.models.records import ApplyOutput
from service.core.models.tuning import LlmAdapter
from service.core.validation import describe_validation
from workers.adapters.base import ApplyOutcome, ApplyRequest
from workers.adapters.llm.edits import EditPlan, plan_changes, write_changes
from workers.adapters.llm.formats import AnswerSchema
from workers.adapters.llm.pool import Providers
from workers.adapters.llm.prompts import tree_view
from workers.adapters.llm.session import Message, Session, json_answer
from workers.adapters.llm.step import LlmStep, step_exit

REPAIR = (
    "Nothing was changed: {problems}\n"
    "Answer again with the whole corrected JSON object (every edit, not only the failed ones), "
    "quoting the files' current text exactly."
)


def check_plan(answer: str, root: Path) -> tuple[EditPlan | None, dict[Path, str], list[str]]:
    """The plan and the files it changes, or what is wrong with it (nothing is written here)."""
    try:
        plan = EditPlan.model_validate_json(json_answer(answer))
    except ValidationError as exc:
        return None, {}, [describe_validation(exc)]
    if plan.structural is not None:
        return plan, {}, []
    texts, failures = plan_changes(root, plan)
    return plan, texts, failures


def prompt_values(request: ApplyRequest, schema: str) -> dict[str, str]:
    prose = request.feedback.prose()
    return {
        "case_id": request.case.id,
        "phase": request.phase,
        "attempt": str(request.attempt),
        "improvements": "\n\n".join(f"{n}. {imp.change}" for n, imp in enumerate(prose, 1)) or "(none)",
        "summary": request.feedback.summary or "(no summary)",
        "files": tree_view(request.worktree_dir),
        "budget": request.budget.brief() if request.budget is not None else "No size limit is set.",
        "schema": schema,
    }


class LlmApplier(LlmStep[ApplyOutcome]):
    """Asks a model for edits and makes them in the worktree; an answer that does not validate or whose
    edits cannot all be made (text not found exactly once, a path outside the worktree) changes
    nothing and gets one repair round naming what failed."""

    def __init__(self, config: LlmAdapter, providers: Providers | None = None) -> None:
        super().__init__(config, providers, "applier", "apply", ApplyOutcome)
        self._answer = AnswerSchema("edits", EditPlan.model_json_schema())

    async def apply(self, request: ApplyRequest) -> ApplyOutcome:
        return await self._in_session(
            request, self._answer, lambda session, started: self._edit(session, request, started)
        )

    async def _edit(self, session: Session, request: ApplyRequest, started: float) -> ApplyOutcome:
        values = prompt_values(request, self._answer.quoted)
        messages: list[Message] = [{"role": "user", "content": self._template.substitute(values)}]
        answer = await session.ask(messages)
        plan, texts, failures = check_plan(answer, request.worktree_dir)
        if failures:
            session.say(f"nothing applied, one repair round: {'; '.join(failures)}")
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": REPAIR.format(problems="; ".join(failures))},
            ]
            answer = await session.ask(messages)
            plan, texts, failures = check_plan(answer, request.worktree_dir)
        if plan is None or failures:
            problems = "; ".join(failures)
            session.say(f"nothing applied after the repair round: {problems}")
            why = f"its edits could not be made after one repair round: {problems}"
            return self._failed(started, why, spent=session.meter.usage())
        write_changes(texts)
        session.say(
            f"changed {len(texts)} files" if plan.structural is None else f"structural: {plan.structural}"
        )
        output = ApplyOutput(
            structural=plan.structural,
            skills=plan.skills,
            summary=plan.summary,
            usage=session.meter.usage(),
        )
        return ApplyOutcome(
            exit=step_exit(started, None),
            output=output.model_dump_json(indent=2).encode(),
            source=self.source,
        )
