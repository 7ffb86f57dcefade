"""The analyze step: the meta agent grades a run against the case's rubric.

The analyzer works on a private copy of the run's system version; if it edits that copy the edit
is reported as an event and discarded. Its feedback is validated against the schema, and scores
of rubric ids the case lacks are dropped with a note. An analyzer that exits 0 with unusable
feedback gets one more chance; one that timed out or failed does not: the case ends failed naming
the file, the field and how the analyzer ended.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from service.core.io.trees import copy_tree, is_large, off_loop, remove_tree
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.records import ApplyRecord, Feedback, Note, Phase, RunRecord, Verdict, new_seal
from service.core.system import tree_digest
from service.core.validation import describe_validation
from workers.adapters.base import AnalyzeRequest, EarlierTry, StepExit
from workers.errors import JobFault
from workers.kinds.cases.run import CaseRun
from workers.memory_bound import memory_oversize
from workers.spend import refused_usage

ANALYZER_ROUNDS = 2


class FeedbackInvalid(Exception):
    """Feedback that is missing or does not follow the schema."""


def read_feedback(path_text: str, raw: bytes | None, case: Case) -> tuple[Feedback, list[str]]:
    """The valid feedback, scoring only the case's rubric ids, and the unknown ids dropped from it."""
    if raw is None:
        raise FeedbackInvalid(f"{path_text}: missing")
    try:
        feedback = Feedback.model_validate_json(raw)
    except ValidationError as exc:
        raise FeedbackInvalid(describe_validation(exc, path_text)) from exc
    known = set(case.rubric_ids)
    dropped = sorted(set(feedback.rubric) - known)
    if dropped:
        kept = {item: score for item, score in feedback.rubric.items() if item in known}
        feedback = feedback.model_copy(update={"rubric": kept})
    return feedback, dropped


def _recorded(case_run: CaseRun, path: Path, run: RunRecord) -> Feedback | None:
    """The feedback the fleet recorded for this very run, if any: one whose seals do not match (an
    agent's forgery, or the grade of a run since set aside) is ignored and the run graded anew."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        feedback, _ = read_feedback(str(path), raw, case_run.case)
    except FeedbackInvalid:
        case_run.log.warning("feedback_invalid_rerun", file=str(path))
        return None
    if feedback.run_seal != run.seal:  # both None: records written before seals existed
        case_run.log.warning("feedback_unsealed_ignored", file=str(path), run_seal=run.seal)
        return None
    return feedback


def earlier_tries(case_run: CaseRun, phase: Phase, attempt: int, version: str) -> list[EarlierTry]:
    """What the analyzer is told of the case's earlier tries (and which of them ran, in this phase, on
    `version`, the version of the run it grades: a pass among those says a failure may be chance)."""
    earlier: list[EarlierTry] = []
    for p, n, paths in case_run.store.attempts():
        if (p, n) == (phase, attempt):
            break
        feedback = case_run.record(paths.feedback, Feedback)  # the last ones may be landing
        if feedback is not None:
            graded = feedback.model_dump(include={"verdict", "rubric", "summary"})
            run = case_run.record(paths.run, RunRecord)
            same = p == phase and run is not None and run.version == version
            earlier.append(
                EarlierTry(
                    phase=p, attempt=n, rejected=_rejected(case_run, paths.apply), same_version=same, **graded
                )
            )
    return earlier


def _rejected(case_run: CaseRun, apply_file: Path) -> str | None:
    """What the analyzer is told of an apply the acceptance gate rejected: its edit and what it broke."""
    applied = case_run.record(apply_file, ApplyRecord)
    if applied is None or applied.gate is None or not applied.rejected:
        return None
    broke = f"; it broke {', '.join(applied.gate.broken)}" if applied.gate.broken else ""
    return f"the edit ({applied.output.summary or 'no summary'}) was rejected: {applied.gate.why}{broke}"


async def _analyzer_view(
    case_run: CaseRun, run: RunRecord, run_work: Path, work: Path, trusted: bool
) -> tuple[Path, Path]:
    """The system and memory the analyzer reads: for in-process code that never edits, the shared
    snapshot and the run's memory as they are; for an agent, private copies (phase mem starts from the
    run's own memory, not the analyzer's)."""
    if trusted:
        return await case_run.tuning.repo.snapshot(run.version), run_work / "memory"
    await remove_tree(work)
    work.mkdir(parents=True)
    system = await case_run.tuning.repo.private_copy(run.version, work / "system")
    memory = work / "memory"
    given = run_work / "memory"
    if given.is_dir() and await memory_oversize(case_run.tuning.config, given) is None:
        await copy_tree(given, memory)
    memory.mkdir(exist_ok=True)
    return system, memory


async def analyze_step(case_run: CaseRun, phase: Phase, attempt: int, run: RunRecord) -> Feedback:
    """The attempt's feedback, running the analyzer only if the fleet recorded none for this run."""
    paths = case_run.store.attempt(phase, attempt)
    if run.void is not None:
        feedback = Feedback(
            verdict="void", done=False, infra=run.void, summary=run.void, run_seal=run.seal, seal=new_seal()
        )
        await case_run.write(paths.feedback, feedback)
        return feedback
    recorded = _recorded(case_run, paths.feedback, run)
    if recorded is not None:
        if recorded.seal is not None and not case_run.store.has_note("graded", recorded.seal):
            _note_graded(case_run, phase, attempt, recorded)  # the worker before died between the two
        return recorded
    await case_run.check_budget()
    where = case_run.where(phase, attempt, "analyze")
    run_work = paths.root / run.work
    trusted = case_run.tuning.analyzer.trusted
    system, memory = await _analyzer_view(case_run, run, run_work, where["step_dir"], trusted)
    large = not trusted and is_large(system)  # the copy's size, decided once for both digests
    before = None if trusted else await off_loop(large, tree_digest, system)
    request = AnalyzeRequest(
        **where,
        case=case_run.case,
        run=run,
        system_dir=system,
        memory_dir=memory,
        workspace_dir=run_work / "workspace",
        earlier=earlier_tries(case_run, phase, attempt, run.version),
    )
    await case_run.controls.wait_key_accepted(case_run.tuning.name)
    case_run.at("analyze", phase, attempt)
    case_run.emit_soon(EventKind.STEP_STARTED, step="analyze", phase=phase, attempt=attempt)
    began = datetime.now(UTC)
    feedback, report, dropped, source = await _analyze(case_run, request)
    feedback = feedback.model_copy(update={"run_seal": run.seal, "seal": new_seal()})
    if before is not None and await off_loop(large, tree_digest, system) != before:
        await case_run.emit(
            EventKind.ANALYSIS_EDITED_SYSTEM,
            phase=phase,
            attempt=attempt,
            detail="the analyzer edited its copy of the system; the edit was discarded",
        )
    if not trusted:
        await remove_tree(system)
    if dropped:
        _note_dropped(case_run, phase, attempt, source, dropped)
    duration_ms = int((datetime.now(UTC) - began).total_seconds() * 1000)

    def graded() -> None:
        _note_graded(case_run, phase, attempt, feedback)
        case_run.step_finished_soon(
            (phase, attempt, "analyze"),
            feedback.usage,
            duration_ms=duration_ms,
            detail=f"{feedback.verdict}{', done' if feedback.done else ''}",
            data={"outcome": feedback.verdict},
        )

    # analysis.md is for people; feedback.json is the record (flushed to disk), under the same fence; it
    # lands while the case's next agent starts (CaseRun.write_behind)
    also = [(paths.analysis, report)] if report is not None else []
    case_run.write_behind(paths.feedback, feedback, *also, then=graded)
    return feedback


def _note_dropped(case_run: CaseRun, phase: Phase, attempt: int, source: str, dropped: list[str]) -> None:
    """Scores of rubric ids the case lacks were left out of the feedback: keep a note and log it."""
    case_run.log.warning("feedback_rubric_dropped", ids=dropped, file=source, phase=phase, attempt=attempt)
    text = (
        f"{source}: field 'rubric': dropped scores of ids not in the case's rubric: "
        f"{', '.join(dropped)} (expected one of {', '.join(case_run.case.rubric_ids)})"
    )
    _note(case_run, phase, attempt, "dropped", text)


def _note_graded(case_run: CaseRun, phase: Phase, attempt: int, feedback: Feedback) -> None:
    """The try's grade in the case's notes, with the seal of the feedback record it notes."""
    graded = (
        f"void: {feedback.infra}" if feedback.verdict == "void" else (feedback.summary or feedback.verdict)
    )
    _note(case_run, phase, attempt, "graded", graded, feedback.verdict, feedback.rubric, feedback.seal)


def _note(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    kind: Literal["graded", "dropped"],
    text: str,
    verdict: Verdict | None = None,
    rubric: dict[str, float] | None = None,
    seal: str | None = None,
) -> None:
    """A note on the try in the case's notes, by this worker."""
    note = Note(
        kind=kind,
        rev=case_run.case.rev,
        phase=phase,
        attempt=attempt,
        verdict=verdict,
        rubric=rubric or {},
        text=text,
        worker=case_run.worker,
        seal=seal,
    )
    case_run.store.add_note(note)


def _how_it_ended(ended: StepExit) -> str:
    """How an analyzer's process ended, for a reason: `timed out after 600 s`, `exited 3: <last line>`,
    `could not start: <program>: <why>`, `exited 0`, `failed: <an LLM step's error>`."""
    if ended.sandbox_down is not None:
        return f"could not run in its sandbox: {ended.sandbox_down}"
    if ended.error is None:
        return f"exited {ended.exit_code}"
    if ended.error.startswith("cannot start "):
        return f"could not start: {ended.error.removeprefix('cannot start ')}"
    if ended.timed_out or ended.error.startswith("exited "):
        return ended.error
    return f"failed: {ended.error}"  # an LLM step's sentence ("its answer was not valid ...")


async def _analyze(
    case_run: CaseRun, request: AnalyzeRequest
) -> tuple[Feedback, bytes | None, list[str], str]:
    """Valid feedback, the report, the rubric ids dropped and the feedback's file, from at most
    ANALYZER_ROUNDS runs of the analyzer: only one that exited 0 with unusable feedback is asked again."""
    problem = ""
    for _ in range(ANALYZER_ROUNDS):
        with case_run.metered({"phase": request.phase, "attempt": request.attempt, "step": "analyze"}):
            outcome = await case_run.tuning.analyzer.analyze(request)
        await case_run.landed()  # the run's record, and the one before it
        stopped = outcome.exit.provider_down or outcome.exit.key_refused
        if stopped is not None and outcome.exit.spent is not None:  # paid for before the provider stopped
            why = f"analysis stopped: {stopped}"
            await case_run.record_spend(request.phase, request.attempt, "analyze", outcome.exit.spent, why)
        outcome.exit.raise_if_stopped("the analyzer")
        try:
            feedback, dropped = read_feedback(outcome.source, outcome.feedback, case_run.case)
        except FeedbackInvalid as exc:
            problem = f"{exc} (the analyzer {_how_it_ended(outcome.exit)})"
            spent = outcome.exit.spent or refused_usage(outcome.feedback)
            await case_run.record_spend(
                request.phase, request.attempt, "analyze", spent, f"feedback refused: {exc}"
            )
            case_run.log.warning("feedback_invalid", problem=problem, exit_code=outcome.exit.exit_code)
            if outcome.exit.error is not None or outcome.exit.exit_code != 0:
                break  # timed out, failed or could not start: asking again would only repeat it
            continue
        return feedback, outcome.analysis, dropped, outcome.source
    raise JobFault(f"analysis wrote no usable feedback: {problem}")
