"""The case loop (docs/architecture.md, "One case through the fleet"), top to bottom.

Phase `nomem`: tries without memory until one passes; phase `mem`: tries again from the memory
the passing run wrote. Every step is skipped when its result is already in the attempt's folder,
so calling `run_loop` again after any interruption carries on at the first missing step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from service.core.io.files import read_model
from service.core.io.trees import on_folder
from service.core.models.events import CASE_ENDS, EventKind
from service.core.models.records import (
    ApplyRecord,
    CaseResult,
    Feedback,
    Note,
    Phase,
    RunRecord,
    Usage,
    VoidBaseline,
)
from service.kinds.evals.gate.index import index_seed, note_passed
from workers.errors import OverBudget, VoidsExhausted
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.apply import gated_apply
from workers.memory_bound import memory_oversize
from workers.spend import case_usage
from workers.steps.analyze import analyze_step
from workers.steps.apply import apply_step
from workers.steps.run import run_step


@dataclass(frozen=True)
class Passed:
    """A phase ended with a passing try."""

    attempt: int
    memory: Path
    seal: str | None
    """The passing feedback's seal: the memory phase's first run follows it."""


@dataclass(frozen=True)
class Difficult:
    """A phase ended without a pass that further tries could bring."""

    phase: Phase
    reason: str


async def run_loop(case_run: CaseRun) -> CaseResult:
    """Run the case to its end (or return the result it already has). A fault of the case's own
    (workers.errors.JobFault) ends it `failed` in the job envelope (workers.envelope)."""
    done = case_run.store.result()
    if done is not None:
        return done
    phase: Phase = "nomem"
    try:
        nomem = await run_phase(
            case_run, "nomem", case_run.tuning.config.tries, None, None, out_of_tries="wrong"
        )
        if isinstance(nomem, Difficult):
            return await end_case(case_run, "difficult", nomem.phase, nomem.reason)
        phase = "mem"
        oversize = await memory_oversize(case_run.tuning.config, nomem.memory)  # before any copy of it
        if oversize is not None:
            return await end_case(case_run, "difficult", phase, oversize)
        mem = await run_phase(
            case_run, "mem", case_run.tuning.config.mem_tries, nomem.memory, nomem.seal, out_of_tries="memory"
        )
        if isinstance(mem, Difficult):
            return await end_case(case_run, "difficult", mem.phase, mem.reason)
        oversize = await memory_oversize(case_run.tuning.config, mem.memory)  # it grew in the memory phase
        if oversize is not None:
            return await end_case(case_run, "difficult", phase, oversize)
        return await end_case(case_run, "completed", "mem", None, kept=mem)
    except OverBudget as over:  # checked before each step starts (workers.spend)
        return await end_case(case_run, "difficult", phase, over.reason)


async def run_phase(
    case_run: CaseRun, phase: Phase, tries: int, memory: Path | None, after: str | None, out_of_tries: str
) -> Passed | Difficult:
    """`after`: the seal of the record the phase's first run follows (the records chain, see
    service.core.models.records). With `confirm_runs`, a pass stands only once enough of that many more
    runs on the same version pass (`confirm`); one that does not stand is a failed try."""
    rejected: list[ApplyRecord] = []
    applies = 0
    attempt = 0
    for tried in range(1, tries + 1):
        attempt += 1
        run, feedback = await try_once(case_run, phase, attempt, memory, after)
        passed_at = attempt
        if feedback.done:
            confirmed, attempt, feedback = await confirm(case_run, phase, attempt, memory, feedback)
            if confirmed:
                kept = case_run.store.attempt(phase, passed_at).root / run.work / "memory"
                return Passed(passed_at, kept, feedback.seal)
        reason = feedback.dataset_only()
        if reason is not None:
            return Difficult(phase, reason)
        after = feedback.seal
        if tried < tries:
            gated = case_run.tuning.config.gate is not None or case_run.tuning.config.guards is not None
            applied = await (gated_apply if gated else apply_step)(case_run, phase, attempt, feedback)
            if applied.output.structural is not None:
                return Difficult(phase, f"structural: {applied.output.structural}")
            applies += 1
            if applied.rejected:  # the next try runs on the current version as it is
                rejected.append(applied)
            after = applied.seal
    if applies and len(rejected) == applies:
        broken = sorted({case for r in rejected if r.gate is not None for case in r.gate.broken})
        return Difficult(phase, f"gated: {', '.join(broken) or 'every apply was rejected'}")
    return Difficult(phase, out_of_tries)


async def confirm(
    case_run: CaseRun, phase: Phase, attempt: int, memory: Path | None, passed: Feedback
) -> tuple[bool, int, Feedback]:
    """Run the tuning's `confirm_runs` after the pass at `attempt`, on the same version (no apply between
    them), stopping as soon as the outcome is settled: whether the pass stands, the last attempt run, and
    the feedback the phase goes on from (the pass's, or the last failing run's, which is applied)."""
    config = case_run.tuning.config
    needed, runs = config.confirm_needed, config.confirm_runs
    passes = fails = 0
    feedback = passed
    last_failed: Feedback | None = None
    while passes < needed and fails <= runs - needed:
        attempt += 1
        _, feedback = await try_once(case_run, phase, attempt, memory, feedback.seal)
        if feedback.done:
            passes += 1
        else:
            fails += 1
            last_failed = feedback
    if passes >= needed:
        return True, attempt, feedback
    assert last_failed is not None  # the loop ends unsettled only on a failure
    return False, attempt, last_failed


async def try_once(
    case_run: CaseRun, phase: Phase, attempt: int, memory: Path | None, after: str | None
) -> tuple[RunRecord, Feedback]:
    """Run and analyze; a void run is set aside and the try runs again, up to `max_voids` in a row."""
    while True:
        run = await run_step(case_run, phase, attempt, memory, after)
        feedback = await analyze_step(case_run, phase, attempt, run)
        if feedback.verdict != "void":
            return run, feedback
        await case_run.landed()  # the records of the try set aside
        await case_run.lease.check()
        aside = case_run.store.set_aside(phase, attempt)
        await case_run.emit(
            EventKind.ATTEMPT_SET_ASIDE,
            phase=phase,
            attempt=attempt,
            detail=f"void: {feedback.infra}",
            data={"folder": aside.name},
        )
        in_a_row = voids_in_a_row(case_run, phase, attempt)
        if in_a_row >= case_run.tuning.config.max_voids:
            await mark_voids_seen(case_run, phase, attempt)
            raise VoidsExhausted(f"{in_a_row} void runs in a row, the last: {feedback.infra}")


def voids_in_a_row(case_run: CaseRun, phase: Phase, attempt: int) -> int:
    """Voids of this try since the case last ended failed for voids (those were counted then)."""
    seen = _void_baseline(case_run).get(f"{phase}-{attempt}", 0)
    return len(case_run.store.voids(phase, attempt)) - seen


def _void_baseline(case_run: CaseRun) -> dict[str, int]:
    baseline = read_model(case_run.store.voids_file, VoidBaseline)
    return dict(baseline.root) if baseline is not None else {}


async def mark_voids_seen(case_run: CaseRun, phase: Phase, attempt: int) -> None:
    baseline = _void_baseline(case_run)
    baseline[f"{phase}-{attempt}"] = len(case_run.store.voids(phase, attempt))
    await case_run.write(case_run.store.voids_file, VoidBaseline(baseline))


async def end_case(
    case_run: CaseRun, state: str, phase: Phase | None, reason: str | None, kept: Passed | None = None
) -> CaseResult:
    """Keep the memory of the passing try `kept` (a completed case), write the case's result and send its
    end. No agent starts after this: the case's slot is given up at once, and this bookkeeping gives way
    to the jobs that start in it meanwhile (workers.slots)."""
    await case_run.wind_down()
    if kept is not None:  # after its passing grade
        await case_run.lease.check()
        memory = kept.memory
        stored = await on_folder(
            memory, case_run.tuning.store.submit_memory, case_run.case.id, case_run.case.rev, memory
        )
        case_run.emit_soon(EventKind.MEMORY_SUBMITTED, phase="mem", attempt=kept.attempt, detail=str(stored))
        await case_run.runtime.slots.turn(after_records=True)
    spent = case_usage(case_run.store)  # every record counts
    handbacks = case_run.store.handbacks()
    result = CaseResult.model_validate(
        {
            "case": case_run.case.id,
            "rev": case_run.case.rev,
            "state": state,
            "phase": phase,
            "reason": reason,
            "at": datetime.now(UTC),
            "usage": spent.usage.model_dump(),
            "steps": spent.steps,
            "flaky": spent.flaky,
            "handbacks": len(handbacks),
            "handback_usage": sum((h.usage for h in handbacks), Usage()).model_dump(),
        }
    )
    tuning = case_run.tuning
    seed = index_seed(tuning.config, tuning.is_stale()) if state == "completed" else None
    if seed is not None:  # into the gate's index before the result: the index never misses a pass
        await note_passed(case_run.runtime.redis, tuning.name, seed, case_run.case.id)
    await case_run.write(case_run.store.result_file, result)
    case_run.at(None)  # leaves the running hash with the event below
    if state in ("difficult", "failed"):
        where = {"nomem": "without memory: ", "mem": "with memory: ", None: ""}[phase]
        case_run.store.add_note(
            Note(
                at=result.at,
                kind="difficult" if state == "difficult" else "failed",
                rev=case_run.case.rev,
                phase=phase,
                text=f"{where}{reason}",
                worker=case_run.worker,
            )
        )
    await case_run.emit(
        CASE_ENDS[result.state],
        phase=phase,
        detail=reason,
        data={"steps": spent.steps},
        tokens=None,
        cost_usd=None,
    )
    return result
