"""The analyze step: the meta agent grades a run against the case's rubric.

The analyzer works on a private copy of the run's system version; if it edits that copy the edit
is reported as an event and discarded. Its feedback is validated (schema and rubric ids); an
analyzer that writes invalid feedback gets one more chance, then the case ends failed naming
the file and the field.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from service.files import describe_validation, read_model
from service.models.case import Case
from service.models.records import Feedback, Note, Phase, RunRecord, new_seal
from service.system import tree_digest
from workers.adapters.base import AnalyzeRequest, EarlierTry
from workers.case import CaseRun
from workers.errors import CaseFault

ANALYZER_ROUNDS = 2


class FeedbackInvalid(Exception):
    """Feedback that does not follow the schema or names rubric items the case lacks."""


def read_feedback(path_text: str, raw: bytes | None, case: Case) -> Feedback:
    if raw is None:
        raise FeedbackInvalid(f"{path_text}: missing (the analyzer wrote no feedback)")
    try:
        feedback = Feedback.model_validate_json(raw)
    except ValidationError as exc:
        raise FeedbackInvalid(f"{path_text}: {describe_validation(exc)}") from exc
    unknown = sorted(set(feedback.rubric) - set(case.rubric_ids))
    if unknown:
        raise FeedbackInvalid(
            f"{path_text}: field 'rubric.{unknown[0]}': not a rubric id of case {case.id} "
            f"(expected one of {', '.join(case.rubric_ids)})"
        )
    return feedback


def _recorded(cr: CaseRun, path: Path, run: RunRecord) -> Feedback | None:
    """The feedback the fleet recorded for this very run, if any: one whose seals do not match (an
    agent's forgery, or the grade of a run since set aside) is ignored and the run graded anew."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        feedback = read_feedback(str(path), raw, cr.case)
    except FeedbackInvalid:
        cr.log.warning("feedback_invalid_rerun", file=str(path))
        return None
    if feedback.run_seal != run.seal:  # both None: records written before seals existed
        cr.log.warning("feedback_unsealed_ignored", file=str(path), run_seal=run.seal)
        return None
    return feedback


def earlier_tries(cr: CaseRun, phase: Phase, attempt: int) -> list[EarlierTry]:
    """What the analyzer is told of the case's earlier tries."""
    earlier: list[EarlierTry] = []
    for p, n, paths in cr.store.attempts():
        if (p, n) == (phase, attempt):
            break
        feedback = read_model(paths.feedback, Feedback)
        if feedback is not None:
            graded = feedback.model_dump(include={"verdict", "rubric", "summary"})
            earlier.append(EarlierTry(phase=p, attempt=n, **graded))
    return earlier


async def analyze_step(cr: CaseRun, phase: Phase, attempt: int, run: RunRecord) -> Feedback:
    """The attempt's feedback, running the analyzer only if the fleet recorded none for this run."""
    paths = cr.store.attempt(phase, attempt)
    if run.void is not None:
        feedback = Feedback(
            verdict="void", done=False, infra=run.void, summary=run.void, run_seal=run.seal, seal=new_seal()
        )
        await cr.write(paths.feedback, feedback)
        return feedback
    recorded = _recorded(cr, paths.feedback, run)
    if recorded is not None:
        return recorded
    where = cr.where(phase, attempt, "analyze")
    work: Path = where["step_dir"]
    run_work = paths.root / run.work
    trusted = cr.tuning.analyzer.trusted
    if trusted:  # in-process code that never edits: the shared snapshot and the run's memory as they are
        system = await cr.tuning.repo.snapshot(run.version)
        memory = run_work / "memory"
    else:  # an agent: private copies; phase mem starts from the run's own memory, not the analyzer's
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        system = await cr.tuning.repo.private_copy(run.version, work / "system")
        memory = work / "memory"
        if (run_work / "memory").is_dir():
            shutil.copytree(run_work / "memory", memory)
        memory.mkdir(exist_ok=True)
    before = None if trusted else tree_digest(system)
    request = AnalyzeRequest(
        **where,
        case=cr.case,
        run=run,
        system_dir=system,
        memory_dir=memory,
        workspace_dir=run_work / "workspace",
        earlier=earlier_tries(cr, phase, attempt),
    )
    cr.at("analyze", phase, attempt)
    await cr.emit("step_started", step="analyze", phase=phase, attempt=attempt)
    began = datetime.now(UTC)
    feedback, report = await _analyze(cr, request)
    feedback = feedback.model_copy(update={"run_seal": run.seal, "seal": new_seal()})
    if before is not None and tree_digest(system) != before:
        await cr.emit(
            "analysis_edited_system",
            phase=phase,
            attempt=attempt,
            detail="the analyzer edited its copy of the system; the edit was discarded",
        )
    if not trusted:
        shutil.rmtree(system, ignore_errors=True)
    # analysis.md is for people; feedback.json is the record (flushed to disk), under the same fence
    await cr.write(paths.feedback, feedback, *([(paths.analysis, report)] if report is not None else []))
    cr.store.add_note(
        Note(
            at=datetime.now(UTC),
            kind="graded",
            rev=cr.case.rev,
            phase=phase,
            attempt=attempt,
            verdict=feedback.verdict,
            rubric=feedback.rubric,
            worker=cr.worker,
            text=f"void: {feedback.infra}"
            if feedback.verdict == "void"
            else (feedback.summary or feedback.verdict),
        )
    )
    await cr.emit(
        "step_finished",
        step="analyze",
        phase=phase,
        attempt=attempt,
        duration_ms=int((datetime.now(UTC) - began).total_seconds() * 1000),
        tokens=feedback.usage.tokens,
        cost_usd=feedback.usage.cost_usd,
        detail=f"{feedback.verdict}{', done' if feedback.done else ''}",
        data={"outcome": feedback.verdict},
    )
    return feedback


async def _analyze(cr: CaseRun, request: AnalyzeRequest) -> tuple[Feedback, bytes | None]:
    """Valid feedback and the report, from at most ANALYZER_ROUNDS runs of the analyzer."""
    problem = ""
    for _ in range(ANALYZER_ROUNDS):
        outcome = await cr.tuning.analyzer.analyze(request)
        try:
            return read_feedback(outcome.source, outcome.feedback, cr.case), outcome.analysis
        except FeedbackInvalid as exc:
            problem = str(exc)
            if outcome.exit.error:
                problem += f" (the analyzer {outcome.exit.error})"
            cr.log.warning("feedback_invalid", problem=problem, exit_code=outcome.exit.exit_code)
    raise CaseFault(f"analysis wrote no usable feedback: {problem}")
