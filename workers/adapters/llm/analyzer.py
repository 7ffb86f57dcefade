"""The analyzer as a model behind an OpenAI-compatible Chat Completions API: the Feedback JSON of
the case's own schema (workers.adapters.llm.grading), one repair round."""

from __future__ import annotations

import json

from service.core.models.case import Case
from service.core.models.records import SEAL_FIELDS, Feedback
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import AnalyzeOutcome, AnalyzeRequest
from workers.adapters.llm.formats import AnswerSchema
from workers.adapters.llm.grading import base_schema, check_feedback, feedback_schema
from workers.adapters.llm.pool import Providers
from workers.adapters.llm.prompts import tree_view, workspace_view
from workers.adapters.llm.session import Message, Session
from workers.adapters.llm.step import LlmStep, step_exit

SCHEMAS_KEPT = 256
"""Feedback schemas an analyzer keeps, one per rubric (its ids); it forgets them all past this."""
REPAIR = (
    "Your answer is not valid: {problem}\n"
    "Answer again with the whole corrected JSON object, and nothing else."
)


def _earlier(request: AnalyzeRequest) -> str:
    if not request.earlier:
        return "(none: this is the case's first try)"
    lines = "\n".join(
        f"- {e.phase} try {e.attempt}: {e.verdict}, scores {json.dumps(e.rubric)}: {e.summary}"
        + (" (same instructions as this run)" if e.same_version else "")
        + (f"\n  Its apply was REJECTED by the gate (not published): {e.rejected}" if e.rejected else "")
        for e in request.earlier
    )
    passed = [e for e in request.earlier if e.same_version and e.verdict == "pass"]
    if passed:
        lines += (
            f"\nNote: {len(passed)} earlier run(s) with these same instructions passed. If this run fails, "
            "the agent may simply be random on this case: blame the instructions only for what this run "
            "shows, and propose no edit for chance."
        )
    return lines


def prompt_values(request: AnalyzeRequest, schema: str) -> dict[str, str]:
    """The template's values; `schema` is the feedback schema as the prompt quotes it (schema_text)."""
    run, case = request.run, request.case
    # pydantic's own JSON (json.dumps with an indent runs in pure Python: ten times dearer)
    record = run.model_dump_json(indent=2, exclude=set(SEAL_FIELDS))
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
        "run_record": record,
        "missed_skills": ", ".join(run.missed_skills) or "(none)",
        "earlier": _earlier(request),
        "workspace": workspace_view(request.workspace_dir),
        "system": tree_view(request.system_dir),
        "schema": schema,
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


class LlmAnalyzer(LlmStep[AnalyzeOutcome]):
    """Grades a run by asking a model for the Feedback JSON (one repair round if it does not validate,
    skips a rubric item or contradicts itself; the step fails if the repaired answer still does).

        Trusted (`trusted = True`): this is the worker's own code, not an agent process. It only reads
        the run's snapshot, memory and workspace to quote them in the prompt and writes nothing but its
        own step folder, so it may read the shared snapshot instead of a private copy; the model never
        touches a file.
    """

    trusted = True

    def __init__(self, config: LlmAdapter, providers: Providers | None = None) -> None:
        super().__init__(config, providers, "analyzer", "analyze", AnalyzeOutcome)
        self._base_schema = base_schema()
        self._schemas: dict[tuple[str, ...], AnswerSchema] = {}

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        answer = self._schema(request.case)
        return await self._in_session(
            request, answer, lambda session, started: self._grade(session, request, answer.quoted, started)
        )

    def _schema(self, case: Case) -> AnswerSchema:
        """The case's feedback schema, made once per rubric (cases share rubrics, and a schema, its
        text and its sent copy are dear to make)."""
        ids = tuple(case.rubric_ids)
        made = self._schemas.get(ids)
        if made is None:
            if len(self._schemas) >= SCHEMAS_KEPT:
                self._schemas.clear()
            made = self._schemas[ids] = AnswerSchema("feedback", feedback_schema(case, self._base_schema))
        return made

    async def _grade(
        self, session: Session, request: AnalyzeRequest, quoted: str, started: float
    ) -> AnalyzeOutcome:
        prompt = self._template.substitute(prompt_values(request, quoted))
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
            why = f"its answer was not valid after one repair round: {problem}"
            return self._failed(started, why, spent=session.meter.usage())
        feedback = feedback.model_copy(
            update={"usage": session.meter.usage(), "run_seal": None, "seal": None}
        )
        return AnalyzeOutcome(
            exit=step_exit(started, None),
            feedback=feedback.model_dump_json(indent=2).encode(),
            analysis=report(feedback, request, self._config.model).encode(),
            source=self.source,
        )
