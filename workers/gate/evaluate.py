"""A candidate's gate: an evaluation of the candidate version on the gate's cases, run as eval items on
the fleet (workers.evals) while the applying case waits, its slot lent to them; then the rule's verdict.

Regression cases (a fixed folder) are also graded on the candidate's base version, in an evaluation
shared by every gate on that base: their baseline. Cases that passed need none (they passed).
The gate's evaluations are named after what they judge, so that a worker that takes the case over finds
the one its predecessor launched and waits for it instead of paying for another.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import TunefleetError
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.records import Phase, Usage
from service.evals.counters import OUTCOMES
from service.evals.fleet import Evals
from service.evals.models import EvalCaseRef, EvalSpec, ItemResult, Purpose
from service.gate.cases import choose
from service.gate.config import GateConfig
from service.gate.models import Candidate, GateItem, GateRecord
from service.gate.rule import judge
from workers.case import CaseRun
from workers.spend import ledger

log = structlog.get_logger()

POLL_S = 0.2
"""How often a case waiting for its gate looks at the gate's ended-item counters."""
RESCAN_S = 5.0
"""The longest a waiting gate goes without walking its items' folders, whatever the counters say."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:20]


def _spec(
    cr: CaseRun, eval_id: str, purpose: Purpose, version: str, cases: list[Case], repeats: int
) -> EvalSpec:
    return EvalSpec(
        id=eval_id,
        tuning=cr.tuning.name,
        purpose=purpose,
        version_asked=version,
        version=version,
        source="gate",
        cases=[EvalCaseRef(id=case.id, rev=case.rev) for case in cases],
        repeats=repeats,
        created_at=datetime.now(UTC),
    )


async def _outcomes(redis: Redis, evals: Evals, spec: EvalSpec) -> dict[tuple[str, int], ItemResult]:
    """Every item's outcome, once each item has one (the case's lease heartbeats meanwhile).

    A poll is one HMGET of the evaluation's ended-item counters; the items' folders are walked (off the
    event loop) only when those moved, or RESCAN_S after the last walk should the counters have missed
    an end (Redis lost and restored, say): a gate waiting on many items costs its worker no disk walk
    per poll."""
    found = evals.folder.eval(spec.id)
    wanted = [(case.id, k) for case, k in spec.items()]
    fields = [f"eval:{spec.id}:{outcome}" for outcome in OUTCOMES]
    seen: int | None = None
    walked_s = float("-inf")
    while True:
        counts = await redis.hmget(keys.stats(spec.tuning), fields)  # type: ignore[misc]
        ended = sum(int(count or 0) for count in counts)
        if ended != seen or time.monotonic() - walked_s >= RESCAN_S:
            seen, walked_s = ended, time.monotonic()
            outcomes = (await asyncio.to_thread(found.scan)).outcomes
            if all(item in outcomes for item in wanted):
                return outcomes
        await asyncio.sleep(POLL_S)


def _verdict(outcome: ItemResult | None) -> str | None:
    return outcome.verdict if outcome is not None and outcome.state == "graded" else None


async def gate_candidate(cr: CaseRun, phase: Phase, attempt: int, candidate: Candidate) -> GateRecord:
    """Evaluate the candidate on the gate's cases and judge it (gate.json's content)."""
    config = cr.tuning.config.gate
    assert config is not None
    # a walk of the tuning's case folders: off the event loop, which runs the worker's other jobs
    chosen = await asyncio.to_thread(choose, config, cr.tuning.store, cr.tuning.held_out, cr.case.id)
    if not chosen.all:
        return GateRecord(
            candidate=candidate.version,
            base=candidate.base,
            eval=None,
            verdict="passed",
            why="no case to gate on",
            at=datetime.now(UTC),
        )
    key = f"{cr.tuning.name}/{cr.case.id}/{cr.case.rev}/{phase}/{attempt}/{candidate.version}"
    spec = _spec(cr, f"gate-{_digest(key)}", "gate", candidate.version, chosen.all, config.repeats)
    base_spec = None
    if chosen.regression:
        refs = ",".join(f"{c.id}@{c.rev}" for c in chosen.regression)
        base_id = f"gate-base-{_digest(cr.tuning.name, candidate.base, refs, str(config.repeats))}"
        base_spec = _spec(cr, base_id, "gate-base", candidate.base, chosen.regression, config.repeats)
    evals = Evals(cr.runtime.redis, cr.runtime.store, cr.settings)
    fresh = not evals.folder.eval(spec.id).exists()
    await cr.lease.check()
    spec = await evals.launch(spec, chosen.all)
    if base_spec is not None:
        base_spec = await evals.launch(base_spec, chosen.regression)
    if fresh:
        await cr.emit(
            EventKind.GATE_STARTED,
            step="apply",
            phase=phase,
            attempt=attempt,
            detail=f"{spec.total} items on candidate {candidate.version[:12]}",
            data={"gate_eval": spec.id, "candidate": candidate.version, "items": spec.total},
        )
    cr.at("apply", phase, attempt, waiting="gate")
    try:
        with cr.runtime.slots.lent(cr.job_id):
            outcomes = await _outcomes(cr.runtime.redis, evals, spec)
            base = await _outcomes(cr.runtime.redis, evals, base_spec) if base_spec is not None else {}
    except asyncio.CancelledError:
        if cr.job_id in cr.controls.cancelling:  # the user's cancel (not a stopping worker's hand-back)
            await asyncio.shield(_abandon(cr, phase, attempt, candidate, evals, spec.id))
        raise
    return _record(cr, phase, attempt, config, candidate, spec, outcomes, base, chosen.regression)


async def _abandon(
    cr: CaseRun, phase: Phase, attempt: int, candidate: Candidate, evals: Evals, eval_id: str
) -> None:
    """The case was cancelled while its gate ran: the gate's unfinished items are cancelled (it judges for
    no one now; the base version's evaluation, shared with other gates, runs on), and the applier's
    usage, which no record holds until the apply's is written, goes into the case's ledger and, with
    the envelope's settling, into the tuning's totals."""
    cr.unfinished_spend(candidate.output.usage, {"phase": phase, "attempt": attempt, "step": "apply"})
    try:
        await evals.cancel(eval_id)
        await cr.emit(
            EventKind.GATE_ABANDONED,
            step="apply",
            phase=phase,
            attempt=attempt,
            detail="the case was cancelled while its candidate was under gate",
            data={"gate_eval": eval_id, "candidate": candidate.version},
        )
    except (RedisError, OSError, TunefleetError) as exc:
        log.warning("gate_abandon_failed", eval=eval_id, error=str(exc))


def _record(
    cr: CaseRun,
    phase: Phase,
    attempt: int,
    config: GateConfig,
    candidate: Candidate,
    spec: EvalSpec,
    outcomes: dict[tuple[str, int], ItemResult],
    base: dict[tuple[str, int], ItemResult],
    regression: list[Case],
) -> GateRecord:
    regression_ids = {case.id for case in regression}
    items = []
    usage = Usage()
    for case, k in spec.items():
        outcome = outcomes.get((case.id, k))
        if outcome is not None:
            usage += outcome.usage
        baseline = _verdict(base.get((case.id, k))) if case.id in regression_ids else "pass"
        items.append(
            GateItem(
                case=case.id,
                repeat=k,
                baseline=baseline,
                verdict=_verdict(outcome),
                reason=outcome.reason if outcome is not None else None,
            )
        )
    judgement = judge(config, items)
    _charge_case(cr, phase, attempt, spec.id, usage)
    return GateRecord(
        candidate=candidate.version,
        base=candidate.base,
        eval=spec.id,
        verdict=judgement.verdict,
        why=judgement.why,
        items=items,
        broken=judgement.broken,
        baseline_rate=judgement.baseline_rate,
        candidate_rate=judgement.candidate_rate,
        usage=usage,
        at=datetime.now(UTC),
    )


def _charge_case(cr: CaseRun, phase: Phase, attempt: int, eval_id: str, usage: Usage) -> None:
    """The gate's spend into the case's ledger (its budget counts it), once per gate: the tuning's totals
    counted it already, through the items' own events."""
    why = f"gate {eval_id}"
    if not any(spend.why == why for spend in ledger(cr.store.root)):
        cr.note_spend(phase, attempt, "apply", usage, why)
