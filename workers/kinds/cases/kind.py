"""Cases as a kind of leased job (workers.envelope): how one is loaded, pursued (the case loop,
workers.kinds.cases.loop) and ended."""

from __future__ import annotations

import structlog

from service.core.errors import CaseFileError, StoreError, TunefleetError
from service.core.models.events import CASE_ENDS, EventKind
from service.core.models.jobs import CASE_FUNCTION, CaseJob, JobResult
from service.core.models.records import CaseResult, Note
from service.kinds.evals.errors import HeldOutError
from workers.envelope import Ending, JobKind
from workers.errors import LeaseLost
from workers.kinds.cases.loop import end_case, run_loop
from workers.kinds.cases.run import CaseRun
from workers.lease import Grant, JobLease
from workers.runtime import WorkerRuntime

log = structlog.get_logger()


def result_of(result: CaseResult) -> JobResult:
    return JobResult(state=result.state, reason=result.reason, steps=result.steps)


class CaseKind(JobKind[CaseJob, CaseRun]):
    """One case of a tuning, from its first missing step to its result."""

    function, noun, payload = CASE_FUNCTION, "case", CaseJob

    def run_view_of(self, runtime: WorkerRuntime, job: CaseJob) -> str | None:
        """A case's first run usually starts right after its load: one round trip less, when run starts
        read the pending applies at all (`wait_for_apply`)."""
        return job.tuning if runtime.settings.wait_for_apply else None

    async def prepare(self, runtime: WorkerRuntime, job: CaseJob) -> None:
        await runtime.llm_ready(job.tuning)

    async def load(
        self, runtime: WorkerRuntime, job: CaseJob, lease: JobLease, grant: Grant, job_try: int
    ) -> CaseRun:
        """The case's run; TunefleetError naming the file when the tuning's config or the case file
        cannot be read."""
        try:
            tuning = runtime.tuning(job.tuning)
        except OSError as exc:  # the config vanished or turned unreadable between two reads
            raise StoreError(f"tuning {job.tuning!r}: its config cannot be read: {exc}") from exc
        if job.case in tuning.held_out:  # enqueued past the submission's check: never tuned on
            raise HeldOutError(
                f"case {job.case!r} is held out of tuning {job.tuning!r}: it is only evaluated"
            )
        store = tuning.store.case(job.case, job.rev)
        case = store.load_case()
        if case is None:
            raise CaseFileError(
                str(store.case_file), "(file)", "the submitted case is missing from the store"
            )
        case_run = CaseRun(runtime, lease, tuning, case, store)
        case_run.start_view = grant.view
        data = grant.started(lease.token, job_try)
        case_run.emit_soon(EventKind.CASE_STARTED, data=data)  # with the first step's first round trip
        return case_run

    async def unloadable(
        self, runtime: WorkerRuntime, job: CaseJob, lease: JobLease, state: Ending, reason: str
    ) -> JobResult:
        """Write the result (fenced) and send its event, even when the case's folder cannot be written;
        the result it already had, if it had one."""
        store = runtime.store.tuning(job.tuning).case(job.case, job.rev)
        try:
            done = store.result()
            if done is not None:  # ended before (its event was sent then): nothing to do again
                return result_of(done)
            await lease.check()
            result = CaseResult(case=job.case, rev=job.rev, state=state, reason=reason)
            store.write_result(result)
            if state == "failed":
                store.add_note(
                    Note(at=result.at, kind="failed", rev=job.rev, text=reason, worker=runtime.name)
                )
        except LeaseLost:
            raise  # another worker owns the case now: it writes the result
        except (OSError, TunefleetError) as unwritable:
            log.error("case_result_unwritable", error=str(unwritable), reason=reason)
        try:
            await runtime.sink.emit(
                CASE_ENDS[state],
                job.tuning,
                case=job.case,
                rev=job.rev,
                detail=reason,
                running=(job.job_id, None),
            )
        except OSError as unwritable:  # the tuning's events file: the counters have not moved either
            log.error("case_event_unwritable", error=str(unwritable), reason=reason)
        return JobResult(state=state, reason=reason, steps=0)

    async def pursue(self, run: CaseRun) -> JobResult:
        return result_of(await run_loop(run))

    async def end(self, run: CaseRun, state: Ending, reason: str) -> JobResult:
        done = run.store.result()
        if done is not None:
            return result_of(done)
        return result_of(await end_case(run, state, None, reason))


KIND = CaseKind()
"""The kind as the worker runs it (workers.jobs)."""
