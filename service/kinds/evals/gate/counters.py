"""The gate's events and the live counters they move in the tuning's counters hash (`tf:stats:<tuning>`,
service.core.events.counter_moves), so that status, the metrics and the dashboard read them in the round
trip that reads the tuning's:

    gates:started      gates begun (an evaluation of a candidate launched)
    gates:under        candidates under gate now (+1 at the start, -1 at the verdict)
    gates:passed       gates whose verdict accepted the candidate
    gates:rejected     candidates rejected: by their gate's verdict, or by a conflict when re-based
    gates:rebased      candidates re-applied on a newer current version
    gates:abandoned    gates left without a verdict: their case was cancelled while they ran
    gates:runs         graded runs the judged gates read (candidate and base; base runs are shared)
    gates:early        judged gates whose test stopped before its last round
    (a person's rejection of a candidate its gate passed, `candidate_decided`, moves one from passed
    to rejected, as the store counts it)
    gates:tokens, gates:cost_usd_micros    what the gates' items spent (already in the tuning's
                       `tokens` and cost: each item's own events count there)

A gate's events carry `data.gate_eval`, never `data.eval`: they are the case's, not the evaluation's.
"""

from __future__ import annotations

from service.core.models.event_types import CandidateDecidedEvent, GatePassedEvent, GateRejectedEvent
from service.core.models.events import Event, EventKind
from service.core.models.records import COST_SCALE

GATE_KINDS = frozenset(
    {
        EventKind.GATE_STARTED,
        EventKind.GATE_PASSED,
        EventKind.GATE_REJECTED,
        EventKind.CANDIDATE_REBASED,
        EventKind.GATE_ABANDONED,
        EventKind.CANDIDATE_DECIDED,
    }
)


def gate_counter_moves(event: Event) -> dict[str, int]:
    """The counters a gate's event moves."""
    if event.kind is EventKind.GATE_STARTED:
        return {"gates:started": 1, "gates:under": 1}
    if event.kind is EventKind.CANDIDATE_REBASED:
        return {"gates:rebased": 1}
    if event.kind is EventKind.GATE_ABANDONED:
        return {"gates:abandoned": 1, "gates:under": -1}
    if isinstance(event, CandidateDecidedEvent):  # a person's rejection turns a pass into a rejection
        return {"gates:passed": -1, "gates:rejected": 1} if event.data.verdict == "rejected" else {}
    if not isinstance(event, GatePassedEvent | GateRejectedEvent):
        return {}
    verdict = event.data
    moves = {"gates:passed" if event.kind is EventKind.GATE_PASSED else "gates:rejected": 1}
    if verdict.judged:  # a verdict on a gate that started (not a rebase's conflict)
        moves["gates:under"] = -1
        if verdict.runs:
            moves["gates:runs"] = verdict.runs
        if verdict.stopped_early:
            moves["gates:early"] = 1
    if verdict.gate_tokens:
        moves["gates:tokens"] = verdict.gate_tokens
    if verdict.gate_cost_usd:
        moves["gates:cost_usd_micros"] = round(verdict.gate_cost_usd * COST_SCALE)
    return moves


def gate_rule(event: Event) -> dict[str, int] | None:
    """The gate's counters rule (service.kinds.registry)."""
    return gate_counter_moves(event) if event.kind in GATE_KINDS else None
