"""A gated apply, top to bottom (docs/architecture.md, "The acceptance gate"):

    the applier, under the lock     its edits become a candidate commit (candidate.json), not current
    the guards, no run              leak, size, collapse (workers.kinds.evals.gate.guard): a rejection is
                                    kept as a gate's is, its reason in guard.json beside gate.json
    the gate, without the lock      the candidate evaluated on the gate's cases, on the fleet (gate.json)
    rejected                        kept under a git ref; the apply is recorded `rejected`
    approval (gate.approval: manual) a person's decision, waited for with the case parked (gate.approval)
    passed                          published under the lock, re-based if the current version moved on
                                    (a conflict rejects it; a re-base that overlaps runs the gate again)

Each stage's record is written before the next starts, so a worker that takes the case over carries on
at the first missing one: the applier is not paid twice, the gate's evaluation is found again by its
name, and a publish already made is found by its trailer.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from service.core.io.files import read_model
from service.core.models.events import EventKind
from service.core.models.records import ApplyRecord, Feedback, GateSummary, Phase
from service.kinds.evals.gate.models import Candidate, GateRecord
from service.kinds.evals.gate.repo import CANDIDATES, REJECTED, ref_name, set_ref
from service.kinds.evals.guards.models import GUARD_FILE
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.approval import await_decision
from workers.kinds.evals.gate.evaluate import gate_candidate
from workers.kinds.evals.gate.events import candidate_event
from workers.kinds.evals.gate.guard import guard_candidate
from workers.kinds.evals.gate.publish import Conflict, Rerun, publish_candidate
from workers.steps.apply import announce_finished, apply_under_lock

CANDIDATE_FILE = "candidate.json"
GATE_FILE = "gate.json"


def _ref(case_run: CaseRun, prefix: str, phase: Phase, attempt: int) -> str:
    try:
        return ref_name(prefix, case_run.case.id, f"r{case_run.case.rev}", f"{phase}-{attempt}")
    except ValueError:  # a case id git would not take as a ref's part
        digest = hashlib.sha256(case_run.case.id.encode()).hexdigest()[:16]
        return ref_name(prefix, digest, f"r{case_run.case.rev}", f"{phase}-{attempt}")


async def gated_apply(case_run: CaseRun, phase: Phase, attempt: int, feedback: Feedback) -> ApplyRecord:
    """The attempt's apply record, through the gate; every stage already recorded is not run again."""
    paths = case_run.store.attempt(phase, attempt)
    candidate_file, gate_file = paths.root / CANDIDATE_FILE, paths.root / GATE_FILE
    candidate_ref = _ref(case_run, CANDIDATES, phase, attempt)
    while True:
        recorded = read_model(paths.apply, ApplyRecord)
        if recorded is not None and recorded.feedback_seal == feedback.seal:
            return recorded
        candidate = read_model(candidate_file, Candidate)
        if candidate is None or candidate.feedback_seal != feedback.seal:
            made = await apply_under_lock(case_run, phase, attempt, feedback, candidate_ref)
            if made is None:
                continue  # the lock was lost: the applier runs again (its edits were never kept)
            if made.version is None:  # structural, or no change: nothing to gate
                return await _record(case_run, phase, attempt, made)
            candidate = Candidate(
                version=made.version,
                base=made.base_version,
                output=made.output,
                fence=made.fence,
                duration_ms=made.duration_ms,
                feedback_seal=feedback.seal,
            )
            await case_run.write(candidate_file, candidate)
        gate = read_model(gate_file, GateRecord)
        if gate is None or gate.candidate != candidate.version:
            gate = await _judge(case_run, phase, attempt, candidate)
        if gate.verdict == "passed" and _manual(case_run):
            gate = await _approval(case_run, phase, attempt, candidate, gate)
        if gate.verdict == "rejected":
            return await _record(case_run, phase, attempt, _rejected(candidate, gate))
        done = await publish_candidate(case_run, phase, attempt, candidate, gate, candidate_ref)
        if done is None:
            continue
        if isinstance(done, Rerun):
            await case_run.write(candidate_file, done.candidate)
            continue
        if isinstance(done, Conflict):
            gate = gate.model_copy(update={"verdict": "rejected", "why": done.why, "at": datetime.now(UTC)})
            gate = await _keep_rejected(case_run, phase, attempt, gate)
            await case_run.write(gate_file, gate)
            await _announce(case_run, phase, attempt, gate, judged=False)
            return await _record(case_run, phase, attempt, _rejected(candidate, gate))
        return await _record(case_run, phase, attempt, done)


def _manual(case_run: CaseRun) -> bool:
    gate = case_run.tuning.config.gate
    return gate is not None and gate.approval == "manual"


async def _approval(
    case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate, gate: GateRecord
) -> GateRecord:
    """The gate's record once a person decided on the candidate it passed: rejected (kept under its ref,
    gate.json rewritten) or as it was."""
    decision = await await_decision(case_run, phase, attempt, candidate)
    if decision.verdict == "approved":
        return gate
    why = "rejected by a person" + (f": {decision.note}" if decision.note else "")
    gate = gate.model_copy(update={"verdict": "rejected", "why": why, "at": decision.at})
    gate = await _keep_rejected(case_run, phase, attempt, gate)
    await case_run.write(case_run.store.attempt(phase, attempt).root / GATE_FILE, gate)
    return gate


async def _judge(case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate) -> GateRecord:
    """The guards' word on the candidate, then (if they pass) its gate's, recorded (gate.json; a guard's
    rejection also in guard.json); without a gate, a candidate the guards pass is published as it is."""
    gate_file = case_run.store.attempt(phase, attempt).root / GATE_FILE
    rejection = await guard_candidate(case_run, candidate)
    if rejection is not None:
        await case_run.write(case_run.store.attempt(phase, attempt).root / GUARD_FILE, rejection)
        gate = GateRecord(
            candidate=candidate.version,
            base=candidate.base,
            eval=None,
            verdict="rejected",
            why=rejection.why,
            at=rejection.at,
        )
        gate = await _keep_rejected(case_run, phase, attempt, gate)
        await case_run.write(gate_file, gate)
        await _announce(case_run, phase, attempt, gate, judged=False)
        return gate
    if case_run.tuning.config.gate is None:
        gate = GateRecord(
            candidate=candidate.version,
            base=candidate.base,
            eval=None,
            verdict="passed",
            why="no gate; the guards passed",
        )
        await case_run.write(gate_file, gate)
        return gate
    gate = await gate_candidate(case_run, phase, attempt, candidate)
    if gate.verdict == "rejected":
        gate = await _keep_rejected(case_run, phase, attempt, gate)
    await case_run.write(gate_file, gate)
    await _announce(case_run, phase, attempt, gate, judged=gate.eval is not None)
    return gate


async def _record(case_run: CaseRun, phase: Phase, attempt: int, record: ApplyRecord) -> ApplyRecord:
    await case_run.write(case_run.store.attempt(phase, attempt).apply, record)
    await announce_finished(case_run, phase, attempt, record)
    return record


async def _keep_rejected(case_run: CaseRun, phase: Phase, attempt: int, gate: GateRecord) -> GateRecord:
    """A rejected candidate stays in the repository under a ref of its own, named in its gate.json."""
    ref = _ref(case_run, REJECTED, phase, attempt)
    await case_run.lease.check()
    await set_ref(case_run.tuning.repo, ref, gate.candidate)
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


async def _announce(case_run: CaseRun, phase: Phase, attempt: int, gate: GateRecord, *, judged: bool) -> None:
    kind = EventKind.GATE_PASSED if gate.verdict == "passed" else EventKind.GATE_REJECTED
    await candidate_event(
        case_run,
        kind,
        phase,
        attempt,
        gate.why,
        {
            "gate_eval": gate.eval,
            "candidate": gate.candidate,
            "broken": gate.broken,
            "items": len(gate.items),
            "judged": judged,
            "gate_tokens": gate.usage.tokens,
            "gate_cost_usd": gate.usage.cost_usd,
            "ref": gate.ref,
            "rule": gate.rule,
            "rounds": gate.rounds,
            "runs": gate.runs,
            **(_test_data(gate) if gate.test is not None and judged else {}),
        },
    )


def _test_data(gate: GateRecord) -> dict[str, object]:
    """The test rule's figures, for the verdict's event."""
    assert gate.test is not None
    return {
        "statistic": round(gate.test.statistic, 4),
        "bound": round(gate.test.bound, 4),
        "futility": round(gate.test.futility, 4),
        "planned_pairs": gate.test.planned_pairs,
        "difference": round(gate.test.difference, 4),
        "lower": round(gate.test.lower, 4),
        "pairs": gate.test.pairs,
        "stopped_early": gate.test.stopped_early,
    }
