"""The case loop (docs/architecture.md, "One case through the fleet"), top to bottom.

Phase `nomem`: tries without memory until one passes; phase `mem`: tries again from the memory
the passing run wrote. Every step is skipped when its result is already in the attempt's folder,
so calling `run_loop` again after any interruption carries on at the first missing step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from service.core.files import read_model
from service.core.models.events import CASE_ENDS, EventKind
from service.core.models.records import (
    ApplyRecord,
    CaseResult,
    Feedback,
    Note,
    Phase,
    RunRecord,
    VoidBaseline,
)
from service.core.trees import on_folder
from workers.case import CaseRun
from workers.errors import OverBudget, VoidsExhausted
from workers.gate.apply import gated_apply
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


async def run_loop(cr: CaseRun) -> CaseResult:
    """Run the case to its end (or return the result it already has). A fault of the case's own
    (workers.errors.JobFault) ends it `failed` in the job envelope (workers.envelope)."""
    done = cr.store.result()
    if done is not None:
        return done
    phase: Phase = "nomem"
    try:
        nomem = await run_phase(cr, "nomem", cr.tuning.config.tries, None, None, out_of_tries="wrong")
        if isinstance(nomem, Difficult):
            return await finish(cr, "difficult", nomem.phase, nomem.reason)
        phase = "mem"
        oversize = await memory_oversize(cr.tuning.config, nomem.memory)  # before any copy of it
        if oversize is not None:
            return await finish(cr, "difficult", phase, oversize)
        mem = await run_phase(
            cr, "mem", cr.tuning.config.mem_tries, nomem.memory, nomem.seal, out_of_tries="memory"
        )
        if isinstance(mem, Difficult):
            return await finish(cr, "difficult", mem.phase, mem.reason)
        oversize = await memory_oversize(cr.tuning.config, mem.memory)  # it grew in the memory phase
        if oversize is not None:
            return await finish(cr, "difficult", phase, oversize)
        return await finish(cr, "completed", "mem", None, kept=mem)
    except OverBudget as over:  # checked before each step starts (workers.spend)
        return await finish(cr, "difficult", phase, over.reason)


async def run_phase(
    cr: CaseRun, phase: Phase, tries: int, memory: Path | None, after: str | None, out_of_tries: str
) -> Passed | Difficult:
    """`after`: the seal of the record the phase's first run follows (the records chain, see
    service.core.models.records)."""
    rejected: list[ApplyRecord] = []
    applies = 0
    for attempt in range(1, tries + 1):
        run, feedback = await try_once(cr, phase, attempt, memory, after)
        if feedback.done:
            return Passed(attempt, cr.store.attempt(phase, attempt).root / run.work / "memory", feedback.seal)
        reason = feedback.dataset_only()
        if reason is not None:
            return Difficult(phase, reason)
        if attempt < tries:
            gated = cr.tuning.config.gate is not None
            applied = await (gated_apply if gated else apply_step)(cr, phase, attempt, feedback)
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


async def try_once(
    cr: CaseRun, phase: Phase, attempt: int, memory: Path | None, after: str | None
) -> tuple[RunRecord, Feedback]:
    """Run and analyze; a void run is set aside and the try runs again, up to `max_voids` in a row."""
    while True:
        run = await run_step(cr, phase, attempt, memory, after)
        feedback = await analyze_step(cr, phase, attempt, run)
        if feedback.verdict != "void":
            return run, feedback
        await cr.landed()  # the records of the try set aside
        await cr.lease.check()
        aside = cr.store.set_aside(phase, attempt)
        await cr.emit(
            EventKind.ATTEMPT_SET_ASIDE,
            phase=phase,
            attempt=attempt,
            detail=f"void: {feedback.infra}",
            data={"folder": aside.name},
        )
        in_a_row = voids_in_a_row(cr, phase, attempt)
        if in_a_row >= cr.tuning.config.max_voids:
            await mark_voids_seen(cr, phase, attempt)
            raise VoidsExhausted(f"{in_a_row} void runs in a row, the last: {feedback.infra}")


def voids_in_a_row(cr: CaseRun, phase: Phase, attempt: int) -> int:
    """Voids of this try since the case last ended failed for voids (those were counted then)."""
    seen = _void_baseline(cr).get(f"{phase}-{attempt}", 0)
    return len(cr.store.voids(phase, attempt)) - seen


def _void_baseline(cr: CaseRun) -> dict[str, int]:
    baseline = read_model(cr.store.voids_file, VoidBaseline)
    return dict(baseline.root) if baseline is not None else {}


async def mark_voids_seen(cr: CaseRun, phase: Phase, attempt: int) -> None:
    baseline = _void_baseline(cr)
    baseline[f"{phase}-{attempt}"] = len(cr.store.voids(phase, attempt))
    await cr.write(cr.store.voids_file, VoidBaseline(baseline))


async def finish(
    cr: CaseRun, state: str, phase: Phase | None, reason: str | None, kept: Passed | None = None
) -> CaseResult:
    """Keep the memory of the passing try `kept` (a completed case), write the case's result and send its
    end. No agent starts after this: the case's slot is given up at once, and this bookkeeping gives way
    to the jobs that start in it meanwhile (workers.slots)."""
    await cr.wind_down()
    if kept is not None:  # after its passing grade
        await cr.lease.check()
        memory = kept.memory
        stored = await on_folder(memory, cr.tuning.store.submit_memory, cr.case.id, cr.case.rev, memory)
        cr.emit_soon(EventKind.MEMORY_SUBMITTED, phase="mem", attempt=kept.attempt, detail=str(stored))
        await cr.runtime.slots.turn(after_records=True)
    usage, steps = case_usage(cr.store)  # every record counts
    result = CaseResult.model_validate(
        {
            "case": cr.case.id,
            "rev": cr.case.rev,
            "state": state,
            "phase": phase,
            "reason": reason,
            "at": datetime.now(UTC),
            "usage": usage.model_dump(),
            "steps": steps,
        }
    )
    await cr.write(cr.store.result_file, result)
    cr.at(None)  # leaves the running hash with the event below
    if state in ("difficult", "failed"):
        where = {"nomem": "without memory: ", "mem": "with memory: ", None: ""}[phase]
        cr.store.add_note(
            Note(
                at=result.at,
                kind="difficult" if state == "difficult" else "failed",
                rev=cr.case.rev,
                phase=phase,
                text=f"{where}{reason}",
                worker=cr.worker,
            )
        )
    await cr.emit(
        CASE_ENDS[result.state], phase=phase, detail=reason, data={"steps": steps}, tokens=None, cost_usd=None
    )
    return result
