"""Evaluation items as a kind of leased job (workers.envelope): how one is loaded, pursued and ended.

An item is one try of its case without an apply: the loop's run step, on the evaluation's version with
empty memory, then its analyze step. A void try is set aside as `<k>.void-<n>` and the item runs again;
after the tuning's `max_voids` void tries the item ends `failed` (VoidsExhausted, which the envelope
turns into `end`). Its outcome, `item.json`, is written last, fenced by the lease; an item that has one
is never run again, so a worker that takes an item over carries on at its first step with no record.
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from service.core.errors import TunefleetError
from service.core.models.jobs import JobResult
from service.core.models.records import Feedback, Phase
from service.evals.counters import ITEM_ENDED, ITEM_SET_ASIDE, ITEM_STARTED
from service.evals.models import EVAL_FUNCTION, EvalItemJob, ItemResult
from service.evals.store import EvalsStore, EvalStore
from workers.envelope import Ending, JobKind
from workers.errors import LeaseLost, OverBudget, VoidsExhausted
from workers.evals.run import ItemRun
from workers.lease import CaseLease, Grant
from workers.runtime import WorkerRuntime
from workers.spend import case_usage
from workers.steps.analyze import analyze_step
from workers.steps.run import run_step

log = structlog.get_logger()


def result_of(outcome: ItemResult) -> JobResult:
    return JobResult(state=outcome.state, reason=outcome.verdict or outcome.reason)


def _eval(runtime: WorkerRuntime, job: EvalItemJob) -> EvalStore:
    return EvalsStore(runtime.store.root / "evals").eval(job.eval)


class EvalItemKind(JobKind[EvalItemJob, ItemRun]):
    """One item of an evaluation, from its first missing step to its outcome."""

    function, noun, payload = EVAL_FUNCTION, "eval_item", EvalItemJob

    async def prepare(self, runtime: WorkerRuntime, job: EvalItemJob) -> None:
        await runtime.llm_ready(job.tuning)

    async def load(
        self, runtime: WorkerRuntime, job: EvalItemJob, lease: CaseLease, grant: Grant, job_try: int
    ) -> ItemRun:
        """The item's run: the case as the evaluation keeps it, the tuning's agents; TunefleetError naming
        the file when one of them cannot be read."""
        found = _eval(runtime, job)
        case = found.case(job.case)
        item = found.item(case.id, case.rev, job.repeat)
        ir = ItemRun(runtime, lease, runtime.tuning(job.tuning), case, item, job.eval, job.version)
        ir.emit_soon(ITEM_STARTED, data=grant.started(lease.token, job_try))  # as a case's start
        return ir

    async def unloadable(
        self, runtime: WorkerRuntime, job: EvalItemJob, lease: CaseLease, state: Ending, reason: str
    ) -> JobResult:
        """An item whose evaluation, case or tuning cannot be read ends with the reason (so that it is
        counted and not run in a loop); its event is sent even when its folder cannot be written."""
        found = _eval(runtime, job)
        item = found.item(job.case, 1, job.repeat)
        try:
            done = item.outcome()
            if done is not None:
                return result_of(done)
            await lease.check()
            item.root.mkdir(parents=True, exist_ok=True)
            item.write_outcome(
                ItemResult(
                    case=job.case,
                    rev=1,
                    repeat=job.repeat,
                    state=state,
                    reason=reason,
                    version=job.version,
                    at=datetime.now(UTC),
                    worker=runtime.name,
                )
            )
        except LeaseLost:
            raise
        except (OSError, TunefleetError) as unwritable:
            log.error("eval_item_outcome_unwritable", error=str(unwritable), reason=reason)
        try:
            await runtime.sink.emit(
                ITEM_ENDED,
                job.tuning,
                case=job.case,
                detail=reason,
                data={"eval": job.eval, "repeat": job.repeat, "outcome": state},
            )
        except OSError as unwritable:
            log.error("eval_item_event_unwritable", error=str(unwritable), reason=reason)
        return JobResult(state=state, reason=reason)

    async def pursue(self, run: ItemRun) -> JobResult:
        done = run.item.outcome()
        if done is not None:
            return result_of(done)
        try:
            return await record(run, "graded", feedback=await grade(run))
        except OverBudget as over:  # checked before each step starts, as for a case
            return await record(run, "failed", reason=over.reason)

    async def end(self, run: ItemRun, state: Ending, reason: str) -> JobResult:
        done = run.item.outcome()
        if done is not None:
            return result_of(done)
        return await record(run, state, reason=reason)


async def grade(ir: ItemRun) -> Feedback:
    """Run and analyze the item's try until a run is graded; a void try is set aside and run again, up to
    the tuning's `max_voids` (then VoidsExhausted)."""
    phase: Phase = "nomem"  # an item's one try: a try without memory, numbered by its repeat
    attempt = ir.item.repeat
    while True:
        run = await run_step(ir, phase, attempt, None, None)
        feedback = await analyze_step(ir, phase, attempt, run)
        if feedback.verdict != "void":
            return feedback
        await ir.landed()  # the records of the try set aside
        await ir.lease.check()
        aside = ir.item.set_aside()
        await ir.emit(ITEM_SET_ASIDE, detail=f"void: {feedback.infra}", data={"folder": aside.name})
        voids = len(ir.item.voids())
        if voids >= ir.tuning.config.max_voids:
            raise VoidsExhausted(f"{voids} void runs in a row, the last: {feedback.infra}")


async def record(
    ir: ItemRun, state: str, *, feedback: Feedback | None = None, reason: str | None = None
) -> JobResult:
    """Write the item's outcome (fenced: last, and once) and send its event, as a case ends: its slot
    given up first (`CaseRun.wind_down`), every record landed before it counts them."""
    await ir.wind_down()
    usage, _ = case_usage(ir.item)
    outcome = ItemResult.model_validate(
        {
            "case": ir.case.id,
            "rev": ir.case.rev,
            "repeat": ir.item.repeat,
            "state": state,
            "verdict": feedback.verdict if feedback is not None else None,
            "rubric": feedback.rubric if feedback is not None else {},
            "reason": reason,
            "voids": len(ir.item.voids()),
            "usage": usage.model_dump(),
            "version": ir.version,
            "at": datetime.now(UTC),
            "worker": ir.worker,
        }
    )
    ir.item.root.mkdir(parents=True, exist_ok=True)  # gone when its last try was set aside
    await ir.write(ir.item.outcome_file, outcome)
    await ir.emit(ITEM_ENDED, detail=reason, data={"outcome": outcome.verdict or state})
    return result_of(outcome)
