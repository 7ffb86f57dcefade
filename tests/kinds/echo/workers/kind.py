"""Echo jobs as a kind of leased job (workers.envelope): loaded from the store, pursued one step after the
other (a step finishes once its release file exists), ended with `result.json` written last."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from service.core.io.files import write_model
from service.core.models.events import EventKind
from service.core.models.jobs import JobResult
from tests.kinds.echo.service.models import ECHO_FUNCTION, EchoJob, EchoResult, EchoState, StepDone
from tests.kinds.echo.service.store import EchoStore
from tests.kinds.echo.workers.run import EchoRun
from workers.envelope import Ending, JobKind
from workers.lease import Grant, JobLease
from workers.runtime import WorkerRuntime

RELEASE_POLL_S = 0.02
"""How often a step looks for its release file (the test's hand on the step)."""


def _result(ended: EchoResult) -> JobResult:
    return JobResult(state=ended.state, reason=ended.reason)


def _store(runtime: WorkerRuntime, job: EchoJob) -> EchoStore:
    return EchoStore(runtime.store, job.tuning, job.echo)


class EchoKind(JobKind[EchoJob, EchoRun]):
    """One echo job, from its first step with no record to its result."""

    function, noun, payload = ECHO_FUNCTION, "echo", EchoJob

    async def load(
        self, runtime: WorkerRuntime, job: EchoJob, lease: JobLease, grant: Grant, job_try: int
    ) -> EchoRun:
        echo_run = EchoRun(runtime, lease, job, _store(runtime, job))
        if echo_run.store.result() is None:
            await echo_run.emit(EventKind.JOB_STARTED, data=grant.started(lease.token, job_try))
        return echo_run

    async def unloadable(
        self, runtime: WorkerRuntime, job: EchoJob, lease: JobLease, state: Ending, reason: str
    ) -> JobResult:
        await lease.check()
        ended = EchoResult(state=state, reason=reason, steps_done=0, at=datetime.now(UTC))
        write_model(_store(runtime, job).result_path, ended)
        return _result(ended)

    async def pursue(self, run: EchoRun) -> JobResult:
        ended = run.store.result()
        if ended is not None:
            return _result(ended)
        for step in range(run.spec.steps):
            if run.store.step(step) is not None:
                continue  # done under an earlier lease
            await self._step(run, step)
        return await self._end(run, "completed", "")

    async def _step(self, run: EchoRun, step: int) -> None:
        run.step = step
        name = f"step-{step}"
        started = time.monotonic()
        await run.emit(EventKind.STEP_STARTED, step=name)
        while not run.store.release_path(step).exists():
            await asyncio.sleep(RELEASE_POLL_S)
        done = StepDone(step=step, worker=run.worker, lease=run.lease.token)
        await run.write(run.store.step_path(step), done)
        duration_ms = round((time.monotonic() - started) * 1000)
        await run.emit(EventKind.STEP_FINISHED, step=name, duration_ms=duration_ms)
        run.step = None

    async def end(self, run: EchoRun, state: Ending, reason: str) -> JobResult:
        ended = run.store.result()
        return _result(ended) if ended is not None else await self._end(run, state, reason)

    async def _end(self, run: EchoRun, state: EchoState, reason: str) -> JobResult:
        done = sum(run.store.step(step) is not None for step in range(run.spec.steps))
        ended = EchoResult(state=state, reason=reason, steps_done=done, at=datetime.now(UTC))
        await run.write(run.store.result_path, ended)
        await run.emit(EventKind.JOB_ENDED, detail=reason or None, data={"state": state})
        return _result(ended)


KIND = EchoKind()
"""The kind as the worker runs it."""
