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
from service.kinds.evals.counters import ITEM_ENDED, ITEM_SET_ASIDE, ITEM_STARTED
from service.kinds.evals.models import EVAL_FUNCTION, EvalItemJob, ItemResult
from service.kinds.evals.names import is_gate_eval
from service.kinds.evals.store import EvalsStore, EvalStore
from workers.envelope import Ending, JobKind
from workers.errors import LeaseLost, OverBudget, VoidsExhausted
from workers.kinds.evals.run import ItemRun
from workers.lease import Grant, JobLease
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
        self, runtime: WorkerRuntime, job: EvalItemJob, lease: JobLease, grant: Grant, job_try: int
    ) -> ItemRun:
        """The item's run: the case as the evaluation keeps it, the tuning's agents; TunefleetError naming
        the file when one of them cannot be read."""
        found = _eval(runtime, job)
        case = found.case(job.case)
        item = found.item(case.id, case.rev, job.repeat)
        # A gate's evaluations are rounds of one decision: each draws its demo runs apart (demo_chance).
        # Told by the id's reserved form: an item reads no spec (its case list grows with the evaluation).
        apart = is_gate_eval(job.eval)
        item_run = ItemRun(
            runtime, lease, runtime.tuning(job.tuning), case, item, job.eval, job.version, draws_apart=apart
        )
        item_run.emit_soon(ITEM_STARTED, data=grant.started(lease.token, job_try))  # as a case's start
        return item_run

    async def unloadable(
        self, runtime: WorkerRuntime, job: EvalItemJob, lease: JobLease, state: Ending, reason: str
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


async def grade(item_run: ItemRun) -> Feedback:
    """Run and analyze the item's try until a run is graded; a void try is set aside and run again, up to
    the tuning's `max_voids` (then VoidsExhausted)."""
    phase: Phase = "nomem"  # an item's one try: a try without memory, numbered by its repeat
    attempt = item_run.item.repeat
    while True:
        run = await run_step(item_run, phase, attempt, None, None)
        feedback = await analyze_step(item_run, phase, attempt, run)
        if feedback.verdict != "void":
            return feedback
        await item_run.landed()  # the records of the try set aside
        await item_run.lease.check()
        aside = item_run.item.set_aside()
        await item_run.emit(ITEM_SET_ASIDE, detail=f"void: {feedback.infra}", data={"folder": aside.name})
        voids = len(item_run.item.voids())
        if voids >= item_run.tuning.config.max_voids:
            raise VoidsExhausted(f"{voids} void runs in a row, the last: {feedback.infra}")


async def record(
    item_run: ItemRun, state: str, *, feedback: Feedback | None = None, reason: str | None = None
) -> JobResult:
    """Write the item's outcome (fenced: last, and once) and send its event, as a case ends: its slot
    given up first (`CaseRun.wind_down`), every record landed before it counts them."""
    await item_run.wind_down()
    usage = case_usage(item_run.item).usage
    outcome = ItemResult.model_validate(
        {
            "case": item_run.case.id,
            "rev": item_run.case.rev,
            "repeat": item_run.item.repeat,
            "state": state,
            "verdict": feedback.verdict if feedback is not None else None,
            "rubric": feedback.rubric if feedback is not None else {},
            "reason": reason,
            "voids": len(item_run.item.voids()),
            "usage": usage.model_dump(),
            "version": item_run.version,
            "at": datetime.now(UTC),
            "worker": item_run.worker,
        }
    )
    item_run.item.root.mkdir(parents=True, exist_ok=True)  # gone when its last try was set aside
    await item_run.write(item_run.item.outcome_file, outcome)
    await item_run.emit(ITEM_ENDED, detail=reason, data={"outcome": outcome.verdict or state})
    return result_of(outcome)


KIND = EvalItemKind()
"""The kind as the worker runs it (workers.jobs)."""
