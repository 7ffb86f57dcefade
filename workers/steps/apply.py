"""The apply step: the applier edits the system under the fleet-wide improvements lock.

It edits a private copy of the current version (a plain folder: no git repository an agent could
configure); the fleet commits that folder's content on top of the version, and the commit becomes
current only through the fenced publish. The commit message carries the attempt's trailer, so an
apply whose worker died after publishing is found again instead of being paid for twice. Pushing to
the user's mirror is the daemon's business (service.daemon.mirror): it never holds the lock.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.core.errors import SystemRepoError
from service.core.io.files import read_model
from service.core.io.trees import remove_tree
from service.core.models.events import EventKind
from service.core.models.records import ApplyOutput, ApplyRecord, Feedback, Phase, StepName, Usage, new_seal
from service.core.validation import describe_validation
from service.kinds.evals.gate.repo import parent_of, read_ref, set_ref
from workers.adapters.base import ApplyOutcome, ApplyRequest
from workers.errors import JobFault, LockLost
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.guard import size_budget
from workers.lock import LockHold

TRAILER = "Tunefleet-Attempt"
OUTPUT_TRAILER = "Tunefleet-Output"


def attempt_tag(case_run: CaseRun, phase: Phase, attempt: int) -> str:
    return f"{TRAILER}: {case_run.tuning.name}/{case_run.case.id}/r{case_run.case.rev}/{phase}/{attempt}"


async def apply_step(case_run: CaseRun, phase: Phase, attempt: int, feedback: Feedback) -> ApplyRecord:
    """The attempt's apply record, running the applier only if this apply was never published."""
    paths = case_run.store.attempt(phase, attempt)
    while True:
        recorded = read_model(paths.apply, ApplyRecord)
        if recorded is not None and recorded.feedback_seal == feedback.seal:
            return recorded
        if recorded is not None:
            case_run.log.warning("apply_unsealed_ignored", file=str(paths.apply), feedback_seal=feedback.seal)
        record = await apply_under_lock(case_run, phase, attempt, feedback)
        if record is None:
            continue
        # It lands while the next try's run waits for the applies pending and starts (CaseRun.write_behind);
        # that run reads the skills it should load from it as it was handed over (CaseRun.record).
        where, usage, fields = finished_event(phase, attempt, record)
        finished = functools.partial(case_run.step_finished_soon, where, usage, **fields)
        case_run.write_behind(paths.apply, record, then=finished)
        return record


def system_copy(where: dict[str, Any]) -> Path:
    """Where an apply's applier edits its private copy of the current version (`where`: the step's request
    fields, `CaseRun.where`)."""
    path: Path = where["step_dir"] / "system"
    return path


async def apply_under_lock(
    case_run: CaseRun, phase: Phase, attempt: int, feedback: Feedback, candidate_ref: str | None = None
) -> ApplyRecord | None:
    """Run the applier under the improvements lock; None when the lock was lost (try again). With
    `candidate_ref` (a gated apply, workers.kinds.evals.gate) the edits become a candidate commit kept
    under that
    ref, not the current version: its `version` is the candidate."""
    # its grade lands while the lock is taken: the applier starts once it has (below)
    case_run.hurry_landing()
    await case_run.check_budget()
    await case_run.controls.wait_key_accepted(case_run.tuning.name)
    case_run.at("apply", phase, attempt, waiting="lock")
    await case_run.emit(EventKind.APPLY_WAITS_FOR_LOCK, phase=phase, attempt=attempt)
    where = case_run.where(phase, attempt, "apply")
    tree = system_copy(where)
    try:
        async with case_run.tuning.lock.held(case_run.job_id) as hold:
            await case_run.landed()  # the grade it applies is recorded before its applier starts
            case_run.at("apply", phase, attempt, fence=hold.token)  # the holder, shown with the next event
            record = await _apply_holding(case_run, phase, attempt, feedback, hold, candidate_ref, where)
    except LockLost as exc:
        await case_run.emit(EventKind.APPLY_ABANDONED, phase=phase, attempt=attempt, detail=str(exc))
        return None
    finally:  # the applier's copy, once the lock is let go: the runs waiting for the apply go first
        await remove_tree(tree)
    await follow_main(case_run, hold)
    return record


async def follow_main(case_run: CaseRun, hold: LockHold) -> None:
    """Once the lock is let go (the runs that waited for the apply start meanwhile): move the system
    repository's main to the version the hold published, if it did. Main is the repository's mirror of
    the current version (for people, the daemon's push, and a fleet whose Redis was emptied); it only
    ever moves forward (SystemRepo.update_main), so a late move changes nothing."""
    if hold.published is not None:
        await case_run.tuning.repo.update_main(*hold.published)


def apply_outcome(record: ApplyRecord) -> str:
    """How an apply ended, as its `step_finished` event says: structural, published, rejected (by the
    gate) or unchanged."""
    if record.output.structural:
        return "structural"
    if record.rejected:
        return "rejected"
    return "published" if record.version else "unchanged"


async def announce_finished(case_run: CaseRun, phase: Phase, attempt: int, record: ApplyRecord) -> None:
    where, usage, fields = finished_event(phase, attempt, record)
    await case_run.step_event(EventKind.STEP_FINISHED, where, usage, **fields)


def finished_event(
    phase: Phase, attempt: int, record: ApplyRecord
) -> tuple[tuple[Phase, int, StepName], Usage, dict[str, Any]]:
    """The apply's `step_finished` event: where, what it spent, and its fields."""
    output = record.output
    outcome = apply_outcome(record)
    return (
        (phase, attempt, "apply"),
        output.usage,
        dict(
            duration_ms=record.duration_ms,
            detail=f"structural: {output.structural}"
            if output.structural
            else f"rejected: {record.gate.why}"
            if record.gate is not None and record.rejected
            else (record.version or "no change")[:12],
            data={
                "outcome": outcome,
                "version": record.version,
                "fence": record.fence,
                **({"gate": record.gate.model_dump()} if record.gate is not None else {}),
            },
        ),
    )


async def _made_before(case_run: CaseRun, tag: str, current: str, candidate_ref: str | None) -> str | None:
    """The commit an earlier owner of this apply made: published (found among the current version's
    ancestors by its trailer), or, for a gated apply, kept as its candidate."""
    published = await case_run.tuning.repo.find_published(tag, current)
    if published is not None or candidate_ref is None:
        return published
    made = await read_ref(case_run.tuning.repo, candidate_ref)
    if made is not None and tag in await case_run.tuning.repo.message(made):
        return made
    return None


async def _recovered(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    feedback: Feedback,
    hold: LockHold,
    current: str,
    published: str,
    candidate_ref: str | None,
) -> ApplyRecord:
    """The record of an apply that an earlier holder published before it could record it."""
    output = await output_of(case_run, published)
    await case_run.emit(EventKind.APPLY_RECOVERED, phase=phase, attempt=attempt, detail=published[:12])
    base = current if candidate_ref is None else await parent_of(case_run.tuning.repo, published)
    return _record(feedback, hold, base, published, output, 0)


async def _apply_holding(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    feedback: Feedback,
    hold: LockHold,
    candidate_ref: str | None,
    where: dict[str, Any],
) -> ApplyRecord:
    """The apply under the lock `hold` (`where`: its step request's fields, `CaseRun.where`), its applier
    editing a private copy of the current version (`system_copy`, which the caller removes once the lock
    is let go)."""
    tree = system_copy(where)
    paths = case_run.store.attempt(phase, attempt)
    tag = attempt_tag(case_run, phase, attempt)
    current = await case_run.tuning.version_from(hold.version_at_grant)
    # Only an apply that started before (its folder is there) can have published already.
    started_before = any(paths.root.glob("apply-*"))
    published = await _made_before(case_run, tag, current, candidate_ref) if started_before else None
    if published is not None:
        return await _recovered(case_run, phase, attempt, feedback, hold, current, published, candidate_ref)
    where["step_dir"].mkdir(parents=True, exist_ok=True)
    # Not waited for (it fences nothing; the apply's next event waits for it): the lock is held meanwhile.
    case_run.emit_soon(
        EventKind.STEP_STARTED,
        step="apply",
        phase=phase,
        attempt=attempt,
        data={"fence": hold.token, "lock_wait_ms": hold.wait_ms},
    )
    began = time.monotonic()
    await case_run.tuning.repo.private_copy(current, tree)
    budget = await size_budget(case_run.tuning, current)
    request = ApplyRequest(**where, case=case_run.case, feedback=feedback, worktree_dir=tree, budget=budget)
    with case_run.metered({"phase": phase, "attempt": attempt, "step": "apply"}):
        outcome = await case_run.tuning.applier.apply(request)
    if outcome.output is None and outcome.exit.spent is not None:  # paid for, and nothing to keep
        why = f"apply produced nothing: {outcome.exit.error or 'no output'}"
        await case_run.record_spend(phase, attempt, "apply", outcome.exit.spent, why)
    output = read_output(outcome)
    try:  # until published, the applier's usage is in no record: an apply that ends here counts it
        version = await _publish(case_run, phase, attempt, output, tree, current, hold, candidate_ref)
    except asyncio.CancelledError:  # stopped, or its lock lost (the watchdog cancels): no await
        case_run.note_spend(phase, attempt, "apply", output.usage, "apply stopped before it was published")
        raise
    except Exception as exc:
        why = "apply abandoned: lock lost" if isinstance(exc, LockLost) else f"apply failed: {exc}"
        await case_run.record_spend(phase, attempt, "apply", output.usage, why)
        raise
    return _record(feedback, hold, current, version, output, int((time.monotonic() - began) * 1000))


def _record(
    feedback: Feedback, hold: LockHold, base: str, version: str | None, output: ApplyOutput, duration_ms: int
) -> ApplyRecord:
    """An apply's record: what it started from and made, under which fence, after which feedback."""
    return ApplyRecord(
        base_version=base,
        version=version,
        output=output,
        fence=hold.token,
        duration_ms=duration_ms,
        feedback_seal=feedback.seal,
        seal=new_seal(),
    )


async def _publish(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    output: ApplyOutput,
    tree: Path,
    current: str,
    hold: LockHold,
    candidate_ref: str | None,
) -> str | None:
    """Commit the applier's edits on top of `current` and make the commit current (fenced), or keep it
    under `candidate_ref` for its gate; the new version, if any."""
    if output.structural is not None:
        return None
    message = (
        f"tunefleet: apply {case_run.case.id} {phase}/{attempt}\n\n{output.summary}\n\n"
        f"{attempt_tag(case_run, phase, attempt)}\n{OUTPUT_TRAILER}: {output.model_dump_json()}\n"
    )
    try:
        version = await case_run.tuning.repo.commit_folder(tree, current, message)
    except SystemRepoError as exc:
        raise JobFault(f"the apply's edits could not be committed: {exc}") from exc
    if version is not None and candidate_ref is not None:
        await set_ref(case_run.tuning.repo, candidate_ref, version)
    elif version is not None:
        case_run.tuning.repo.prefetch(version)  # the runs waiting for this apply will run it
        await hold.publish(version, base=current, release=True)  # nothing is left to do under the lock
    return version


def read_output(outcome: ApplyOutcome) -> ApplyOutput:
    outcome.exit.raise_if_stopped("the applier")
    if outcome.output is None:
        why = outcome.exit.error or "wrote no output"
        raise JobFault(f"{outcome.source}: missing (the applier {why})")
    try:
        return ApplyOutput.model_validate_json(outcome.output)
    except ValidationError as exc:
        raise JobFault(describe_validation(exc, outcome.source)) from exc


async def output_of(case_run: CaseRun, version: str) -> ApplyOutput:
    message = await case_run.tuning.repo.message(version)
    for line in message.splitlines():
        if line.startswith(f"{OUTPUT_TRAILER}: "):
            return ApplyOutput.model_validate_json(line.removeprefix(f"{OUTPUT_TRAILER}: "))
    return ApplyOutput(summary="recovered from the published commit")
