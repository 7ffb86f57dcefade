"""The gate's events and the live counters they move in the tuning's counters hash (`tf:stats:<tuning>`,
service.core.events.counter_moves), so that status, the metrics and the dashboard read them in the round
trip that reads the tuning's:

    gates:started      gates begun (an evaluation of a candidate launched)
    gates:under        candidates under gate now (+1 at the start, -1 at the verdict)
    gates:passed       gates whose verdict accepted the candidate
    gates:rejected     candidates rejected: by their gate's verdict, or by a conflict when re-based
    gates:rebased      candidates re-applied on a newer current version
    gates:abandoned    gates left without a verdict: their case was cancelled while they ran
    gates:tokens, gates:cost_usd_micros    what the gates' items spent (already in the tuning's
                       `tokens` and cost: each item's own events count there)

A gate's events carry `data.gate_eval`, never `data.eval`: they are the case's, not the evaluation's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.events import Event, EventKind

GATE_KINDS = frozenset(
    {
        EventKind.GATE_STARTED,
        EventKind.GATE_PASSED,
        EventKind.GATE_REJECTED,
        EventKind.CANDIDATE_REBASED,
        EventKind.GATE_ABANDONED,
    }
)
COST_SCALE = 1_000_000
PREFIX = "gates:"


def gate_counter_moves(event: Event) -> dict[str, int]:
    """The counters a gate's event moves."""
    data = event.data
    if event.kind is EventKind.GATE_STARTED:
        return {"gates:started": 1, "gates:under": 1}
    if event.kind is EventKind.CANDIDATE_REBASED:
        return {"gates:rebased": 1}
    if event.kind is EventKind.GATE_ABANDONED:
        return {"gates:abandoned": 1, "gates:under": -1}
    moves = {"gates:passed" if event.kind is EventKind.GATE_PASSED else "gates:rejected": 1}
    if data.get("judged"):  # a verdict on a gate that started (not a rebase's conflict)
        moves["gates:under"] = -1
    tokens = int(data.get("gate_tokens") or 0)
    cost_usd = float(data.get("gate_cost_usd") or 0.0)
    if tokens:
        moves["gates:tokens"] = tokens
    if cost_usd:
        moves["gates:cost_usd_micros"] = round(cost_usd * COST_SCALE)
    return moves


def gate_fields(counts: dict[str, int]) -> dict[str, int]:
    """The gate's counters of a tuning's counters hash, by name (`started`, `under`, ...)."""
    return {field[len(PREFIX) :]: value for field, value in counts.items() if field.startswith(PREFIX)}


class GateCounts(BaseModel):
    """A tuning's gates as status shows them, from its counters (None when it never gated an apply)."""

    model_config = ConfigDict(extra="forbid")

    under: int = Field(default=0, description="Candidates under gate now.")
    started: int = 0
    passed: int = 0
    rejected: int = 0
    rebased: int = 0
    tokens: int = Field(default=0, description="What the gates' items spent (within the tuning's tokens).")
    cost_usd: float = 0.0

    @classmethod
    def of(cls, counts: dict[str, int]) -> GateCounts | None:
        fields = gate_fields(counts)
        if not fields:
            return None
        return cls(
            under=max(0, fields.get("under", 0)),
            started=fields.get("started", 0),
            passed=fields.get("passed", 0),
            rejected=fields.get("rejected", 0),
            rebased=fields.get("rebased", 0),
            tokens=fields.get("tokens", 0),
            cost_usd=fields.get("cost_usd_micros", 0) / COST_SCALE,
        )

    def line(self) -> str:
        """One line for the terminal: under gate, passed, rejected, re-based, and their cost."""
        return (
            f"{self.under} under gate, {self.passed} passed, {self.rejected} rejected, "
            f"{self.rebased} re-based; gates spent {self.tokens} tokens, ${self.cost_usd:.4f}"
        )
