"""Publishing a candidate that passed its gate, under the improvements lock, fenced as every publish.

If the current version is still the candidate's base, the candidate itself becomes current. If it moved
on (other applies were published while the gate ran), the candidate's edits are re-applied on top of it
(service.kinds.evals.gate.repo.rebase), and then (docs/architecture.md, "The acceptance gate"):

- a conflict: the candidate is rejected;
- the re-applied edits change nothing: they are in the current version already;
- the candidate and the versions published since its base changed no file in common: the verdict
  stands, and the re-based commit is published;
- they changed a file in common: the re-based commit is a new candidate, and its gate runs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from service.core.models.events import EventKind
from service.core.models.records import ApplyRecord, GateSummary, Phase
from service.kinds.evals.gate.models import Candidate, GateRecord
from service.kinds.evals.gate.repo import rebase, set_ref
from workers.errors import LockLost
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.events import candidate_event
from workers.lock import LockHold
from workers.steps.apply import attempt_tag, follow_main

REBASED_TRAILER = "Tunefleet-Rebased-From"


@dataclass(frozen=True)
class Conflict:
    """The candidate's edits do not re-apply on the current version."""

    why: str


@dataclass(frozen=True)
class Rerun:
    """A re-based candidate whose gate must run again."""

    candidate: Candidate


def applied(
    candidate: Candidate, version: str | None, gate: GateRecord, *, rebased: bool, why: str
) -> ApplyRecord:
    summary = GateSummary(
        verdict="passed",
        candidate=candidate.made_from or candidate.version,
        eval=gate.eval,
        rebased=rebased,
        why=why,
    )
    return candidate.record(version, summary)


async def publish_candidate(
    case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate, gate: GateRecord, candidate_ref: str
) -> ApplyRecord | Rerun | Conflict | None:
    """Publish (or re-base) the candidate under the lock; None when the lock was lost (try again)."""
    case_run.at("apply", phase, attempt, waiting="lock")
    await case_run.emit(EventKind.APPLY_WAITS_FOR_LOCK, phase=phase, attempt=attempt)
    try:
        async with case_run.tuning.lock.held(case_run.job_id) as hold:
            case_run.at("apply", phase, attempt, fence=hold.token)
            outcome = await _publish_holding(case_run, phase, attempt, candidate, gate, candidate_ref, hold)
    except LockLost as exc:
        await case_run.emit(EventKind.APPLY_ABANDONED, phase=phase, attempt=attempt, detail=str(exc))
        return None
    await follow_main(case_run, hold)
    return outcome


async def _publish_holding(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    candidate: Candidate,
    gate: GateRecord,
    candidate_ref: str,
    hold: LockHold,
) -> ApplyRecord | Rerun | Conflict:
    repo = case_run.tuning.repo
    current = await case_run.tuning.current_version()
    published = await repo.find_published(attempt_tag(case_run, phase, attempt), current)
    if published is not None:  # an earlier owner published it and died before recording it
        await case_run.emit(EventKind.APPLY_RECOVERED, phase=phase, attempt=attempt, detail=published[:12])
        return applied(candidate, published, gate, rebased=published != candidate.version, why=gate.why)
    if current == candidate.base:
        repo.prefetch(candidate.version)
        await hold.publish(candidate.version, base=current, release=True)  # nothing is left to do under it
        return applied(
            candidate, candidate.version, gate, rebased=candidate.made_from is not None, why=gate.why
        )
    rebased = await rebase(repo, candidate.version, candidate.base, current)
    if rebased.tree is None:
        return Conflict(rebased.conflict)
    if rebased.tree == await repo.tree_of(current):
        return applied(
            candidate, None, gate, rebased=True, why="its edits are in the current version already"
        )
    message = f"{(await repo.message(candidate.version)).rstrip()}\n{REBASED_TRAILER}: {candidate.version}\n"
    version = await repo.commit_tree(rebased.tree, current, message)
    await candidate_event(
        case_run,
        EventKind.CANDIDATE_REBASED,
        phase,
        attempt,
        f"{candidate.version[:12]} re-applied on {current[:12]} as {version[:12]}"
        + (f"; its gate runs again (both changed {', '.join(rebased.overlap)})" if rebased.overlap else ""),
        {
            "candidate": candidate.version,
            "onto": current,
            "version": version,
            "rerun": bool(rebased.overlap),
        },
    )
    if rebased.overlap:
        await set_ref(repo, candidate_ref, version)
        again = candidate.model_copy(
            update={
                "version": version,
                "base": current,
                "made_from": candidate.made_from or candidate.version,
                "at": datetime.now(UTC),
            }
        )
        return Rerun(again)
    repo.prefetch(version)
    await hold.publish(version, base=current, release=True)
    return applied(candidate, version, gate, rebased=True, why=f"{gate.why}; re-based on {current[:12]}")
