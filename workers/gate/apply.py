"""A gated apply, top to bottom (docs/architecture.md, "The acceptance gate"):

    the applier, under the lock     its edits become a candidate commit (candidate.json), not current
    the gate, without the lock      the candidate evaluated on the gate's cases, on the fleet (gate.json)
    rejected                        kept under a git ref; the apply is recorded `rejected`
    passed                          published under the lock, re-based if the current version moved on
                                    (a conflict rejects it; a re-base that overlaps runs the gate again)

Each stage's record is written before the next starts, so a worker that takes the case over carries on
at the first missing one: the applier is not paid twice, the gate's evaluation is found again by its
name, and a publish already made is found by its trailer.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from service.core.files import read_model
from service.core.models.events import EventKind
from service.core.models.records import ApplyRecord, Feedback, GateSummary, Phase
from service.gate.models import Candidate, GateRecord
from service.gate.repo import CANDIDATES, REJECTED, ref_name, set_ref
from workers.case import CaseRun
from workers.gate.evaluate import gate_candidate
from workers.gate.publish import Conflict, Rerun, publish_candidate
from workers.steps.apply import announce_finished, apply_under_lock

CANDIDATE_FILE = "candidate.json"
GATE_FILE = "gate.json"


def _ref(cr: CaseRun, prefix: str, phase: Phase, attempt: int) -> str:
    try:
        return ref_name(prefix, cr.case.id, f"r{cr.case.rev}", f"{phase}-{attempt}")
    except ValueError:  # a case id git would not take as a ref's part
        digest = hashlib.sha256(cr.case.id.encode()).hexdigest()[:16]
        return ref_name(prefix, digest, f"r{cr.case.rev}", f"{phase}-{attempt}")


async def gated_apply(cr: CaseRun, phase: Phase, attempt: int, feedback: Feedback) -> ApplyRecord:
    """The attempt's apply record, through the gate; every stage already recorded is not run again."""
    paths = cr.store.attempt(phase, attempt)
    candidate_file, gate_file = paths.root / CANDIDATE_FILE, paths.root / GATE_FILE
    candidate_ref = _ref(cr, CANDIDATES, phase, attempt)
    while True:
        recorded = read_model(paths.apply, ApplyRecord)
        if recorded is not None and recorded.feedback_seal == feedback.seal:
            return recorded
        candidate = read_model(candidate_file, Candidate)
        if candidate is None or candidate.feedback_seal != feedback.seal:
            made = await apply_under_lock(cr, phase, attempt, feedback, candidate_ref)
            if made is None:
                continue  # the lock was lost: the applier runs again (its edits were never kept)
            if made.version is None:  # structural, or no change: nothing to gate
                return await _record(cr, phase, attempt, made)
            candidate = Candidate(
                version=made.version,
                base=made.base_version,
                output=made.output,
                fence=made.fence,
                duration_ms=made.duration_ms,
                feedback_seal=feedback.seal,
                at=datetime.now(UTC),
            )
            await cr.write(candidate_file, candidate)
        gate = read_model(gate_file, GateRecord)
        if gate is None or gate.candidate != candidate.version:
            gate = await gate_candidate(cr, phase, attempt, candidate)
            if gate.verdict == "rejected":
                gate = await _keep_rejected(cr, phase, attempt, gate)
            await cr.write(gate_file, gate)
            await _announce(cr, phase, attempt, gate, judged=gate.eval is not None)
        if gate.verdict == "rejected":
            return await _record(cr, phase, attempt, _rejected(candidate, gate))
        done = await publish_candidate(cr, phase, attempt, candidate, gate, candidate_ref)
        if done is None:
            continue
        if isinstance(done, Rerun):
            await cr.write(candidate_file, done.candidate)
            continue
        if isinstance(done, Conflict):
            gate = gate.model_copy(update={"verdict": "rejected", "why": done.why, "at": datetime.now(UTC)})
            gate = await _keep_rejected(cr, phase, attempt, gate)
            await cr.write(gate_file, gate)
            await _announce(cr, phase, attempt, gate, judged=False)
            return await _record(cr, phase, attempt, _rejected(candidate, gate))
        return await _record(cr, phase, attempt, done)


async def _record(cr: CaseRun, phase: Phase, attempt: int, record: ApplyRecord) -> ApplyRecord:
    await cr.write(cr.store.attempt(phase, attempt).apply, record)
    await announce_finished(cr, phase, attempt, record)
    return record


async def _keep_rejected(cr: CaseRun, phase: Phase, attempt: int, gate: GateRecord) -> GateRecord:
    """A rejected candidate stays in the repository under a ref of its own, named in its gate.json."""
    ref = _ref(cr, REJECTED, phase, attempt)
    await cr.lease.check()
    await set_ref(cr.tuning.repo, ref, gate.candidate)
    return gate.model_copy(update={"ref": ref})


def _rejected(candidate: Candidate, gate: GateRecord) -> ApplyRecord:
    summary = GateSummary(
        verdict="rejected",
        candidate=candidate.made_from or candidate.version,
        eval=gate.eval,
        broken=gate.broken,
        rebased=candidate.made_from is not None,
        why=gate.why,
    )
    return candidate.record(None, summary)


async def _announce(cr: CaseRun, phase: Phase, attempt: int, gate: GateRecord, *, judged: bool) -> None:
    kind = EventKind.GATE_PASSED if gate.verdict == "passed" else EventKind.GATE_REJECTED
    await cr.emit(
        kind,
        step="apply",
        phase=phase,
        attempt=attempt,
        detail=gate.why,
        data={
            "gate_eval": gate.eval,
            "candidate": gate.candidate,
            "broken": gate.broken,
            "items": len(gate.items),
            "judged": judged,
            "gate_tokens": gate.usage.tokens,
            "gate_cost_usd": gate.usage.cost_usd,
            "ref": gate.ref,
        },
    )
