"""A person's decision on a candidate its gate passed, when the tuning's gate says `approval: manual`
(docs/versions.md, "Approval before publish").

The candidate's case waits, parked (its worker slot lent to other jobs), until a decision is kept in the
candidate's attempt folder (`decision.json`), written by `tunefleet approve|reject` or the API (write token)
through `decide`. The decision lives in the store, so it survives a worker's restart and the loss of Redis:
the worker that takes the case over finds the gate's record (passed) and then the decision, or waits on.
A candidate is named as every version is (service.kinds.evals.history.names) and must be one that waits."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.io.files import read_model, write_model
from service.core.models.records import utc_now
from service.core.store import Store
from service.kinds.evals.gate.models import GateRecord
from service.kinds.evals.history.names import UnknownVersionError, resolve
from service.kinds.evals.history.read import GATE_FILE, attempt_root
from service.kinds.evals.history.views import VersionViews

DECISION_FILE = "decision.json"
Verdict = Literal["approved", "rejected"]


class Decision(BaseModel):
    """`decision.json`: a person's decision on a waiting candidate."""

    model_config = ConfigDict(extra="forbid")

    candidate: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdict: Verdict
    by: str = Field(default="cli", description="Who decided: `cli` or `api`.")
    note: str = Field(default="", max_length=2000)
    at: datetime = Field(default_factory=utc_now)


class NotWaitingError(UnknownVersionError):
    """A candidate that does not wait for a decision (published, rejected, still under gate, decided)."""


def waiting_root(store: Store, tuning: str, asked: str) -> tuple[str, Path]:
    """The full id and attempt folder of the waiting candidate `asked` names; an error naming it if none."""
    views = VersionViews(store)
    found = views.versions(tuning)
    row = resolve(found, asked)
    root = attempt_root(store.known_tuning(tuning), row.origin) if row.origin is not None else None
    gate = read_model(root / GATE_FILE, GateRecord) if root is not None else None
    if row.status != "candidate" or root is None or gate is None or gate.candidate != row.id:
        raise NotWaitingError(
            f"tuning {tuning}: candidate {asked!r} ({row.status}) does not wait for approval; expected a "
            "candidate its gate passed (`tunefleet versions` shows them as `candidate`)"
        )
    if gate.verdict != "passed":
        raise NotWaitingError(f"tuning {tuning}: candidate {asked!r} was rejected by its gate")
    return row.id, root


def decide(store: Store, tuning: str, asked: str, verdict: Verdict, by: str, note: str = "") -> Decision:
    """Keep a person's decision on a waiting candidate (once: a second, other decision is refused)."""
    candidate, root = waiting_root(store, tuning, asked)
    kept = read_model(root / DECISION_FILE, Decision)
    if kept is not None and kept.candidate == candidate:
        if kept.verdict != verdict:
            raise NotWaitingError(f"tuning {tuning}: candidate {asked!r} was {kept.verdict} already")
        return kept
    decision = Decision(candidate=candidate, verdict=verdict, by=by, note=note)
    write_model(root / DECISION_FILE, decision)
    return decision
