"""The run step: the agent executes the case on a read-only snapshot of the current version."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from service.core.io.files import read_model
from service.core.io.trees import copy_tree, remove_tree
from service.core.models.events import EventKind
from service.core.models.records import ApplyRecord, Phase, RunOutput, RunRecord, SandboxTrips, new_seal
from service.core.models.status import Hold, WaitCause
from service.core.models.tuning import CommandAdapter
from workers.adapters.base import RunOutcome, RunRequest
from workers.errors import JobFault
from workers.kinds.cases.run import CaseRun

RUN_WAITS: dict[WaitCause, EventKind] = {
    "resume": EventKind.RUN_WAITS_FOR_RESUME,
    "hold": EventKind.RUN_WAITS_FOR_HOLD,
    "sandbox": EventKind.RUN_WAITS_FOR_SANDBOX,
}
SANDBOX_TRIPS_FILE = "sandbox-trips.json"
"""In the case's folder: how often its runner reported the sandbox down with no sandbox to probe."""


def expected_skills(case_run: CaseRun, phase: Phase, attempt: int) -> list[str]:
    """The skills the apply after the previous try made: this run should load them."""
    if attempt == 1:
        return []
    applied = case_run.record(
        case_run.store.attempt(phase, attempt - 1).apply, ApplyRecord
    )  # it may be landing
    return list(applied.output.skills) if applied else []


@dataclass(frozen=True)
class Runnable:
    """What a run start learned once it may go."""

    apply_wait_ms: int
    """How long it waited for the applies pending."""
    version: str | None
    """The version to run, when read with the pending applies (None: read it now)."""


async def wait_until_runnable(case_run: CaseRun, phase: Phase, attempt: int) -> Runnable:
    """Hold the run start while the fleet is paused, the tuning is held (its budget spent, say), the
    sandbox breaker is open (workers.job_run) or (if configured) an apply is pending. Each wait is noted
    as the case's state (`CaseRun.at`) with the event that announces it. The pending applies and the
    version are asked for in one round trip: with none pending, that version is the one to run. A case's
    first run start, straight after its load, takes them from its lease's round trip instead
    (`CaseRun.take_start_view`)."""

    async def announce(cause: WaitCause, hold: Hold | None) -> None:
        case_run.at("run", phase, attempt, waiting=cause)
        if hold is None:
            await case_run.emit(RUN_WAITS[cause], phase=phase, attempt=attempt)
        else:
            data = {"kind": hold.kind}
            await case_run.emit(RUN_WAITS[cause], phase=phase, attempt=attempt, detail=hold.reason, data=data)

    await case_run.wait_runnable(announce)
    if not case_run.waits_for_applies:
        return Runnable(0, None)
    view = case_run.take_start_view()
    if view is not None:  # the first run start, straight after the load: read with the lease
        pending, value = view.pending, view.version
    else:
        # Both calls queued in this turn, so they share a round trip (and the one of an event the step
        # before queued without waiting: CaseRun.emit_soon). A kind whose runs work on a version of
        # their own never waits for applies (`waits_for_applies`).
        pending, value = await asyncio.gather(
            case_run.tuning.lock.pending_soon([]), case_run.tuning.version_soon()
        )
    if not pending:
        return Runnable(0, await case_run.tuning.version_from(value))
    case_run.at("run", phase, attempt, waiting="apply")
    await case_run.emit(
        EventKind.RUN_WAITS_FOR_APPLY, phase=phase, attempt=attempt, data={"applies": len(pending)}
    )
    waited_s = await case_run.tuning.lock.wait_idle(
        list(pending), case_run.settings.wait_for_apply_max_s, case_run.settings.poll_delay_s
    )
    return Runnable(int(waited_s * 1000), None)


async def run_step(
    case_run: CaseRun, phase: Phase, attempt: int, memory_from: Path | None, after: str | None
) -> RunRecord:
    """The attempt's run record, running the agent only if the fleet recorded none yet: a record that
    does not follow `after` (the seal of the record before it) was not written by the fleet."""
    paths = case_run.store.attempt(phase, attempt)
    recorded = read_model(paths.run, RunRecord)
    if recorded is not None and recorded.after == after:
        return recorded
    if recorded is not None:
        case_run.log.warning("run_unsealed_ignored", file=str(paths.run), after=after)
    while True:  # not read again: only a run that ended writes the record (over anything left there)
        await case_run.check_budget()
        runnable = await wait_until_runnable(case_run, phase, attempt)
        record = await _run_once(case_run, phase, attempt, memory_from, runnable, after)
        if record is not None:  # it lands while the analyzer starts (CaseRun.write_behind)
            case_run.write_behind(
                paths.run, record, then=functools.partial(_finished, case_run, phase, attempt, record)
            )
            return record
        await count_sandbox_trip(case_run)


def nothing_to_probe(case_run: CaseRun) -> bool:
    """Whether the runner has no sandbox that a probe could find down: the breaker closes at its first
    probe, so only a bound on the runner's own reports ends a case whose runner always says so."""
    runner = case_run.tuning.config.runner
    return (
        isinstance(runner, CommandAdapter) and runner.sandbox.kind == "none" and not runner.sandbox.probe_argv
    )


async def count_sandbox_trip(case_run: CaseRun) -> None:
    """Count a sandbox-down report of a runner with nothing to probe, durably in the case's folder (a
    restart goes on counting); past `max_sandbox_trips` the case ends failed, and the count starts afresh."""
    if not nothing_to_probe(case_run):
        return
    path = case_run.store.root / SANDBOX_TRIPS_FILE
    trips = (read_model(path, SandboxTrips) or SandboxTrips()).trips + 1
    if trips <= case_run.tuning.config.max_sandbox_trips:
        await case_run.write(path, SandboxTrips(trips=trips))
        return
    await case_run.write(path, SandboxTrips(trips=0))
    raise JobFault(f"the runner reported its sandbox down {trips} times with no sandbox to probe")


def _finished(case_run: CaseRun, phase: Phase, attempt: int, record: RunRecord) -> None:
    case_run.step_finished_soon(
        (phase, attempt, "run"),
        record.output.usage,
        duration_ms=record.duration_ms,
        detail=record.void or record.output.error or f"{record.output.turns} turns",
        data={
            "outcome": "void" if record.void else "ran",
            "missed_skills": record.missed_skills,
            "timed_out": record.timed_out,
        },
    )


async def _not_ran(case_run: CaseRun, phase: Phase, attempt: int, outcome: RunOutcome) -> bool:
    """Whether the runner could not run the agent because the sandbox was down (reported to the breaker);
    ProviderDown or KeyRefused when its provider was down or refused the key (not this case's fault:
    handed back, no try spent)."""
    outcome.raise_if_stopped("the runner")
    if outcome.sandbox_down is None:
        return False
    await case_run.emit(EventKind.RUN_SANDBOX_DOWN, phase=phase, attempt=attempt, detail=outcome.sandbox_down)
    await case_run.breaker_watch.report_down(case_run.tuning.name, outcome.sandbox_down)
    return True


async def _run_once(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    memory_from: Path | None,
    runnable: Runnable,
    after: str | None,
) -> RunRecord | None:
    """One run of the agent; None when the sandbox was down (the breaker is open, nothing recorded)."""
    where = case_run.where(phase, attempt, "run")
    work: Path = where["step_dir"]
    await remove_tree(work)
    memory = work / "memory"  # made by the runner if it starts empty (an in-process one may never need it)
    if memory_from is not None and memory_from.is_dir():
        await copy_tree(memory_from, memory, plain=True)
    else:
        work.mkdir(parents=True)
    version = runnable.version or await case_run.run_version()
    expected = expected_skills(case_run, phase, attempt)
    request = RunRequest(
        **where,
        task=case_run.case.task(),
        run_index=len(case_run.store.voids(phase, attempt)) + 1,
        version=version,
        system_dir=await case_run.tuning.repo.snapshot(version),
        memory_dir=memory,
        workspace_dir=work / "workspace",
        expected_skills=expected,
    )
    case_run.at("run", phase, attempt)
    case_run.emit_soon(
        EventKind.STEP_STARTED,
        step="run",
        phase=phase,
        attempt=attempt,
        data={"version": version, "apply_wait_ms": runnable.apply_wait_ms},
    )
    started_at = datetime.now(UTC)
    began = time.monotonic()
    with case_run.metered({"phase": phase, "attempt": attempt, "step": "run"}):
        outcome = await case_run.tuning.runner.run(request)
    # The step before's record may still be landing, and the analysis starts meanwhile: it waits for it
    # once its analyzer returns (steps.analyze), and every way out of the job waits for it too.
    if await _not_ran(case_run, phase, attempt, outcome):
        return None
    output = outcome.output
    loaded = set(output.skills_loaded) if output else set()
    record = RunRecord(
        version=version,
        work=work.name,
        started_at=started_at,
        duration_ms=int((time.monotonic() - began) * 1000),
        exit_code=outcome.exit_code,
        void=outcome.void,
        timed_out=outcome.timed_out,
        log_tail=outcome.log_tail,
        output=output or request_output_missing(outcome.void),
        missed_skills=[s for s in expected if s not in loaded],
        memory_in=memory_from is not None,
        seal=new_seal(),
        after=after,
    )
    return record


def request_output_missing(void: str | None) -> RunOutput:
    return RunOutput(error=void or "the runner wrote no output")
