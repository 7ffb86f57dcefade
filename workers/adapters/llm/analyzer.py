"""The analyzer as a model behind an OpenAI-compatible Chat Completions API: the Feedback JSON of
the case's own schema (workers.adapters.llm.grading), one repair round."""

from __future__ import annotations

import json
import time
from typing import Any

from service.core.models.records import SEAL_FIELDS, Feedback, Usage
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import AnalyzeOutcome, AnalyzeRequest
from workers.adapters.llm.errors import LlmStepError
from workers.adapters.llm.grading import base_schema, check_feedback, feedback_schema
from workers.adapters.llm.prompts import load_template, schema_text, tree_view, workspace_view
from workers.adapters.llm.provider import Providers, check_limits
from workers.adapters.llm.session import Message, Session, in_session, step_exit

REPAIR = (
    "Your answer is not valid: {problem}\n"
    "Answer again with the whole corrected JSON object, and nothing else."
)


def _earlier(request: AnalyzeRequest) -> str:
    if not request.earlier:
        return "(none: this is the case's first try)"
    return "\n".join(
        f"- {e.phase} try {e.attempt}: {e.verdict}, scores {json.dumps(e.rubric)}: {e.summary}"
        + (f"\n  Its apply was REJECTED by the gate (not published): {e.rejected}" if e.rejected else "")
        for e in request.earlier
    )


def prompt_values(request: AnalyzeRequest, schema: dict[str, Any]) -> dict[str, str]:
    run, case = request.run, request.case
    record = run.model_dump(mode="json", exclude=set(SEAL_FIELDS))
    return {
        "case_id": case.id,
        "case_input": case.input,
        "rubric": "\n".join(f"- `{item.id}`: {item.text}" for item in case.rubric),
        "phase": request.phase,
        "attempt": str(request.attempt),
        "run_answer": run.output.answer or "(no answer)",
        "run_error": run.output.error or "(none)",
        "run_void": run.void or "(not void)",
        "run_timed_out": "yes: the runner was ended at its timeout" if run.timed_out else "no",
        "run_log_tail": run.log_tail or "(not kept: the run ended by itself with exit 0)",
        "run_record": json.dumps(record, indent=2),
        "missed_skills": ", ".join(run.missed_skills) or "(none)",
        "earlier": _earlier(request),
        "workspace": workspace_view(request.workspace_dir),
        "system": tree_view(request.system_dir),
        "schema": schema_text(schema),
    }


def report(feedback: Feedback, request: AnalyzeRequest, model: str) -> str:
    """analysis.md: the grade for people."""
    none = "(none)\n"
    scores = "".join(f"- {item}: {score:g}\n" for item, score in feedback.rubric.items()) or none
    changes = "".join(f"- ({imp.target}) {imp.lead}\n" for imp in feedback.improvements) or none
    usage = feedback.usage
    return (
        f"# Analysis of {request.case.id}, {request.phase} try {request.attempt}\n\n"
        f"Verdict: **{feedback.verdict}**{' (done)' if feedback.done else ''}, by {model}\n\n"
        f"{feedback.summary}\n\n## Scores\n\n{scores}\n## Improvements\n\n{changes}\n"
        f"Usage: {usage.input_tokens} input and {usage.output_tokens} output tokens"
        f"{f' ({usage.estimated_tokens} of them estimated)' if usage.estimated_tokens else ''}, "
        f"{usage.cost_usd:g} USD.\n"
    )


class LlmAnalyzer:
    """Grades a run by asking a model for the Feedback JSON (one repair round if it does not validate,
    skips a rubric item or contradicts itself; the step fails if the repaired answer still does).

        Trusted (`trusted = True`): this is the worker's own code, not an agent process. It only reads
        the run's snapshot, memory and workspace to quote them in the prompt and writes nothing but its
        own step folder, so it may read the shared snapshot instead of a private copy; the model never
        touches a file.
    """

    trusted = True

    def __init__(self, config: LlmAdapter, providers: Providers | None = None) -> None:
        check_limits(config, providers.redis if providers is not None else None)
        self._config = config
        self._providers = providers
        self._template = load_template("analyze", config.prompts.get("analyze"))
        self._base_schema = base_schema()
        self.source = f"llm analyzer {config.model}"

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        started = time.monotonic()

        def failed(exc: LlmStepError, spent: Usage | None) -> AnalyzeOutcome:
            return AnalyzeOutcome(exit=step_exit(started, str(exc), exc, spent), source=self.source)

        async def grade(session: Session) -> AnalyzeOutcome:
            return await self._grade(session, request, started)

        schema = feedback_schema(request.case, self._base_schema)
        return await in_session(self._config, self._providers, request, "feedback", schema, grade, failed)

    async def _grade(self, session: Session, request: AnalyzeRequest, started: float) -> AnalyzeOutcome:
        prompt = self._template.substitute(prompt_values(request, session.schema))
        messages: list[Message] = [{"role": "user", "content": prompt}]
        answer = await session.ask(messages)
        feedback, problem = check_feedback(answer, request.case)
        if feedback is None:
            session.say(f"the answer is not valid feedback ({problem}): one repair round")
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": REPAIR.format(problem=problem)},
            ]
            answer = await session.ask(messages)
            feedback, problem = check_feedback(answer, request.case)
        if feedback is None:
            session.say(f"the repaired answer is not valid feedback either ({problem})")
            return AnalyzeOutcome(
                exit=step_exit(
                    started,
                    f"its answer was not valid after one repair round: {problem}",
                    spent=session.meter.usage(),
                ),
                source=self.source,
            )
        feedback = feedback.model_copy(
            update={"usage": session.meter.usage(), "run_seal": None, "seal": None}
        )
        return AnalyzeOutcome(
            exit=step_exit(started, None),
            feedback=feedback.model_dump_json(indent=2).encode(),
            analysis=report(feedback, request, self._config.model).encode(),
            source=self.source,
        )
