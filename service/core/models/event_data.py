"""The `data` of each kind of event: one payload model per kind (`service.core.models.event_types` pairs
each kind with its model), every one `extra="forbid"`, so that a key no kind carries, or a value of the
wrong type, is refused by the sink before anything is written (service.core.events.EventSink).

The keys were read from every emit site and from the events files of the fleet's test runs. A payload is
written as it was given: a key left out stays out of the line, a key given None stays None
(`EventData.wire`), so the lines hold the same keys and values as when `data` was a dict (in the
model's field order: a tag's keys first).

Two tags ride on the events that any run may send besides its own:

- `EvalTagged`: the evaluation and repeat of an evaluation item (its run is a case's run, so its steps,
  waits and faults are a case's kinds, carrying `eval` and `repeat`: they move the evaluation's
  counters, never the cases', service.kinds.evals.counters);
- `JobTagged`: the kind and the job of a kind that brings no event kinds of its own (it uses the `job_*`
  kinds and the shared step and fault kinds; docs/architecture.md, "Adding a kind").

Evaluation and gate payloads are plain contracts here, as their kinds are in `EventKind`: the core
imports no kind.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.models.records import GateSummary

HoldKind = Literal["budget", "auth"]
"""Why a tuning is held (service.core.models.status.Hold.kind)."""


class EventData(BaseModel):
    """The payload of an event: its kind's model says which keys it may carry and their types."""

    model_config = ConfigDict(extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The payload as the line carries it: the keys it was given, by their wire names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class NoData(EventData):
    """The payload of a kind that carries no data."""


class EvalTagged(EventData):
    """An event an evaluation item's run may send: its evaluation and repeat (None: not an item's)."""

    eval: str | None = Field(default=None, description="The evaluation of an item's event.")
    repeat: int | None = Field(default=None, description="The item's repeat of its case.")


class JobTagged(EventData):
    """An event a kind without event kinds of its own may send: its kind's name and the job's id."""

    kind: str | None = Field(default=None, description="The job's kind (a kind without kinds of its own).")
    job: str | None = Field(default=None, description="The job's id in its kind.")


class RunTagged(EvalTagged, JobTagged):
    """An event any job's run may send: a step, a fault, a hand-back."""


class LeaseStart(EventData):
    """A leased job's start: the lease, what it lost before, whether it is a suspect, arq's try."""

    lease: int = Field(description="The lease's fencing token.")
    lost_leases: int = Field(description="Leases the job lost that count against it.")
    suspect: str | None = Field(description="'group' or 'isolate' for a suspect of a worker's death.")
    try_: int = Field(alias="try", description="arq's try number.")


class JobStarted(LeaseStart, JobTagged):
    kind: str = Field(description="The job's kind.")
    job: str = Field(description="The job's id in its kind.")


class JobRequeued(JobTagged):
    kind: str = Field(description="The job's kind.")
    job: str = Field(description="The job's id in its kind.")
    retry_in_s: float | None = Field(default=None, description="When it may run again (a hand-back).")


class JobEnded(JobTagged):
    kind: str = Field(description="The job's kind.")
    job: str = Field(description="The job's id in its kind.")
    state: str = Field(description="The job's final state.")


class Requeued(EventData):
    """A case's or goal's job back in the queue: by the daemon's reconcile, a failure run again, or a
    hand-back (`retry_in_s`)."""

    retry_in_s: float | None = Field(default=None, description="When it may run again (a hand-back).")


class CaseEnded(EventData):
    """A case's end."""

    steps: int | None = Field(default=None, description="The steps its folder records.")


class LeaseLost(RunTagged):
    """A job's lease was lost."""


class ProviderDown(RunTagged):
    """A job handed back while an LLM provider is down or refuses the key."""

    retry_in_s: float = Field(description="When it may run again.")
    handbacks: int | None = Field(
        default=None,
        description="The job's provider hand-backs so far (ended failed at provider_handbacks_max).",
    )


class StepStarted(RunTagged):
    """A step's start (a case's, a goal's, an item's, a job's)."""

    version: str | None = Field(default=None, description="The version a case's run works on.")
    apply_wait_ms: int | None = Field(default=None, description="How long a run waited for applies.")
    fence: int | None = Field(default=None, description="The improvements lock's token of an apply.")
    lock_wait_ms: int | None = Field(default=None, description="How long an apply waited for the lock.")


class StepFinished(RunTagged):
    """A step's end (its step and duration_ms are at the top level)."""

    outcome: str | None = Field(
        default=None,
        description="run: ran or void; analyze: its verdict; apply: structural, published, rejected or "
        "unchanged; goal steps: planned, the work's status, complete or continue.",
    )
    missed_skills: list[str] | None = Field(default=None, description="A run's skills not loaded.")
    timed_out: bool | None = Field(default=None, description="A run that ended at its timeout.")
    version: str | None = Field(default=None, description="The version an apply published.")
    fence: int | None = Field(default=None, description="The improvements lock's token of an apply.")
    gate: GateSummary | None = Field(default=None, description="The acceptance gate that judged an apply.")
    tasks: int | None = Field(default=None, description="The tasks of a goal's plan.")


class HoldWait(EvalTagged):
    """A run waits while its tuning is held."""

    kind: HoldKind


class RunWaitsForApply(EventData):
    applies: int = Field(description="The applies under way that the run waits for.")


class AttemptSetAside(EventData):
    folder: str = Field(description="The set-aside folder's name.")


class TuningHeld(EvalTagged):
    kind: HoldKind


class BreakerProbed(EventData):
    closed: bool = Field(description="The probe found the sandbox working: the breaker closes.")


class StepWaitsForHold(EventData):
    kind: HoldKind | None = None


class StepSetAside(EventData):
    voids: int = Field(description="The step's voids so far.")


class GoalEnded(EventData):
    limit: str | None = Field(default=None, description="The limit that ended a goal incomplete.")


class EvalCreated(EventData):
    eval: str
    items: int = Field(description="Items: cases times repeats.")
    version: str = Field(description="The commit every item runs on.")
    purpose: str = Field(description="Why it runs: user, gate, gate-base.")


class EvalItem(EvalTagged):
    """An evaluation item's own event: its evaluation and repeat always."""

    eval: str
    repeat: int


class EvalItemStarted(LeaseStart, EvalItem):
    pass


class EvalItemSetAside(EvalItem):
    folder: str = Field(description="The set-aside folder's name.")


class EvalItemRequeued(EvalItem):
    retry_in_s: float | None = Field(default=None, description="When it may run again (a hand-back).")


class EvalItemEnded(EvalItem):
    outcome: str = Field(description="pass, fail (graded), failed or cancelled.")


class GateStarted(EventData):
    gate_eval: str = Field(description="The gate's evaluation.")
    candidate: str = Field(description="The candidate commit judged.")
    items: int


class GateVerdict(EventData):
    """A gate's verdict (gate_passed, gate_rejected)."""

    gate_eval: str | None = Field(description="The gate's evaluation (None: it had no case to run).")
    candidate: str
    broken: list[str] = Field(description="Cases that passed and fail on the candidate.")
    items: int
    judged: bool = Field(description="A verdict on a gate that ran (not a rebase's conflict).")
    gate_tokens: int
    gate_cost_usd: float
    ref: str | None = Field(description="The git ref a rejected candidate is kept under.")
    rule: str = Field(default="strict", description="The rule that decided: strict, max_drop or test.")
    rounds: int = Field(default=0, description="Rounds of paired repeats run.")
    runs: int = Field(default=0, description="Graded runs spent, candidate and base sides.")
    statistic: float | None = Field(default=None, description="Rule test: the last look's statistic.")
    bound: float | None = Field(default=None, description="Rule test: the bound it was compared with.")
    futility: float | None = Field(
        default=None, description="Rule test: the lower bound (at or below it rejects)."
    )
    planned_pairs: int | None = Field(
        default=None, description="Rule test: the pairs the design planned (both errors bounded)."
    )
    difference: float | None = Field(default=None, description="Rule test: the mean paired difference.")
    lower: float | None = Field(default=None, description="Rule test: the difference's lower bound.")
    pairs: int | None = Field(default=None, description="Rule test: the pairs compared.")
    stopped_early: bool | None = Field(default=None, description="Rule test: decided before the last round.")


class CandidateRebased(EventData):
    candidate: str
    onto: str = Field(description="The current version it was re-applied on.")
    version: str = Field(description="The new candidate.")
    rerun: bool = Field(description="Its gate runs again (both changed the same files).")


class CandidateAwaitsApproval(EventData):
    candidate: str = Field(description="The candidate its gate passed, waiting for a person.")


class CandidateDecided(EventData):
    candidate: str
    verdict: Literal["approved", "rejected"] = Field(description="The person's decision.")
    by: str = Field(description="Where it was made: `cli` or `api`.")


class GateAbandoned(EventData):
    gate_eval: str
    candidate: str
