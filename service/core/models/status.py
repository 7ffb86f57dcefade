"""What the client returns: fleet status, result rows, one case's detail, a submission report."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from service.core.models.acceptance import GateCounts
from service.core.models.records import ApplyRecord, Feedback, Handback, Phase, RunRecord, StepName, utc_now
from service.core.models.redis_value import RedisValue

WaitCause = Literal["resume", "hold", "sandbox", "apply", "lock", "gate", "approval"]
WAIT_WORDS: dict[str, str] = {
    "resume": "waiting for resume",
    "hold": "waiting for the hold",
    "sandbox": "waiting for the sandbox",
    "apply": "waiting for an apply",
    "lock": "waiting for the lock",
    "gate": "waiting for its gate",
    "approval": "waiting for a person's approval",
}
"""What a case held by a worker may wait for before its next step, in the words status shows:
`resume` of the paused fleet, the release of its tuning's hold, the sandbox breaker to close (before
a run), the applies pending to end (before a run, `wait_for_apply`), the improvements lock (before
an apply), the acceptance gate's evaluation of its candidate (service.kinds.evals.gate), a person's
decision on a candidate its gate passed (`gate.approval: manual`, service.kinds.evals.approval)."""


class MirrorState(BaseModel):
    """`tf:mirror:<tuning>`: how the daemon's pushes of a tuning's current version to its remote went."""

    remote: str = Field(description="The tuning's remote, credentials masked.")
    branch: str
    version: str | None = Field(default=None, description="The last version pushed there.")
    pushed_at: datetime | None = None
    error: str | None = Field(
        default=None, description="Why the latest push failed; unset once one succeeds."
    )
    failing_since: datetime | None = Field(default=None, description="The first failure since the last push.")
    at: datetime = Field(description="When the latest push was tried.")
    attempts: NonNegativeInt = Field(default=0, description="Failed pushes in a row.")

    def to_hash(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump(mode="json", exclude_none=True).items()}

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> MirrorState | None:
        """The state in a Redis hash; None when there is none (or it is not one: it is pushed again)."""
        if not raw:
            return None
        try:
            return cls.model_validate({k.decode(): v.decode() for k, v in raw.items()})
        except (ValidationError, UnicodeDecodeError):
            return None


class Hold(RedisValue):
    """A field of `tf:held`: why no run of a tuning starts (its cases wait, nothing is failed) until
    `tunefleet resume TUNING`, or a registration whose budget no longer holds it."""

    kind: Literal["budget", "auth"] = Field(
        description="budget: the tuning spent its budget; auth: a key was refused."
    )
    reason: str
    at: datetime = Field(default_factory=utc_now)


class RunningCase(RedisValue):
    """A value of `tf:running:<tuning>` (job id -> this JSON): where a case a worker holds is now, as the
    worker notes it (workers.kinds.cases.run.CaseRun.at)."""

    model_config = ConfigDict(extra="ignore")

    case: str
    rev: int
    worker: str | None = None
    step: StepName = Field(description="The step it runs, or waits to start when `waiting` is set.")
    phase: Phase
    attempt: int = Field(ge=1)
    since: datetime | None = Field(default=None, description="When the step (or the wait) began.")
    work: str | None = Field(default=None, description="The step's folder in its attempt.")
    waiting: WaitCause | None = Field(default=None, description="Set while the case waits to start `step`.")
    fence: int | None = Field(
        default=None, description="The improvements lock's fencing token, while its apply holds the lock."
    )


class LockHolder(BaseModel):
    """The apply holding a tuning's improvements lock: its case and worker."""

    case: str
    rev: int
    worker: str | None = None
    phase: Phase
    attempt: int


class TuningLock(BaseModel):
    """A tuning's improvements lock as Redis holds it now."""

    held: bool = Field(default=False, description="An apply holds the lock.")
    fence: int | None = Field(default=None, description="The fencing token of the holder.")
    holder: LockHolder | None = Field(
        default=None,
        description="The holder's case and worker (unset for the moment between the grant and the "
        "holder's next event, or when its worker left no note).",
    )
    pending: NonNegativeInt = Field(default=0, description="Applies waiting for or holding the lock.")


class TuningStatus(BaseModel):
    name: str
    submitted: int = 0
    waiting: int = 0
    running: int = Field(default=0, description="Cases a worker holds: at a step, or waiting to start one.")
    running_by_step: dict[str, int] = Field(
        default_factory=dict, description="Of `running`, those at a step (not waiting), by step."
    )
    waiting_by_cause: dict[str, int] = Field(
        default_factory=dict,
        description="Of `running`, those waiting to start their next step, by what they wait for "
        "(`resume`, `hold`, `sandbox`, `apply`, `lock`; see WAIT_WORDS).",
    )
    completed: int = 0
    difficult: int = 0
    failed: int = 0
    cancelled: int = 0
    runs_by_outcome: dict[str, int] = Field(
        default_factory=dict,
        description="Agent runs by outcome: `ran` (graded) and `void` (set aside: voided by the runner "
        "or by the analyzer).",
    )
    tokens: int = 0
    unmeasured_tokens: int = Field(
        default=0, description="Of `tokens`, those nobody measured: the agents' own word (source 'agent')."
    )
    estimated_tokens: int = Field(
        default=0,
        description="Of `tokens`, those the fleet estimated: LLM calls whose answer gave no usage, or that "
        "timed out (billed all the same).",
    )
    cost_usd: float = 0.0
    version: str | None = None
    mirror: MirrorState | None = Field(
        default=None, description="Pushes to the tuning's remote, if it has one."
    )
    held: Hold | None = Field(default=None, description="Set while no run of the tuning starts.")
    lock: TuningLock = Field(default_factory=TuningLock, description="The improvements lock.")
    gates: GateCounts | None = Field(
        default=None, description="The acceptance gate's candidates and verdicts, when it has gated an apply."
    )


class WorkerPresence(RedisValue):
    """The value of `tf:worker:<name>` (renewed every 2 s, gone 6 s after a worker's last beat): a live
    worker's slots and the job ids it holds leases on."""

    worker: str
    slots: NonNegativeInt
    cases: list[str] = Field(default_factory=list)


class WorkerStatus(BaseModel):
    name: str
    slots: int
    cases: list[str]
    last_seen_ms: int


class LlmLimit(BaseModel):
    """An LLM provider whose fleet-wide permits a 429 lowered (adaptive concurrency), as in
    `tf:llm-limits`; it gets one back every few seconds without a 429."""

    provider: str = Field(description="The provider's id in key names.")
    name: str = Field(default="", description="Its model and base_url.")
    limit: int = Field(description="Calls at once the fleet allows it now.")
    max: int = Field(description="Its configured `concurrency`.")
    cuts: int = Field(default=0, description="How often a 429 lowered it since it was last at `max`.")
    changed_ms: int = Field(default=0, description="When the limit last changed (Redis ms).")

    @classmethod
    def parse(cls, provider: str, raw: bytes | str) -> LlmLimit | None:
        try:
            return cls.model_validate({**json.loads(raw), "provider": provider})
        except (ValueError, ValidationError):
            return None


RUNNING_WORDS = {"cases": "case", "eval items": "evaluation item", "gate items": "gate item", "goals": "goal"}
"""The kinds of job `running_by_kind` counts, and how one of each is named."""


class FleetStatus(BaseModel):
    queue_depth: int = Field(description="Jobs in the queue that no worker runs now.")
    in_progress: int = Field(description="Jobs workers run now, of every kind (`running_by_kind`).")
    running_by_kind: dict[str, int] = Field(
        default_factory=dict,
        description="Jobs live workers hold now, by kind: `cases`, `eval items` (of evaluations), "
        "`gate items` (of the acceptance gate's evaluations), `goals`; kinds with none are left out.",
    )
    breaker: dict[str, str]
    paused: bool
    redis_full: str | None = Field(
        default=None, description="Why Redis refuses writes (at maxmemory under noeviction), while it does."
    )
    store_full: str | None = Field(
        default=None,
        description="Why the workers stopped claiming for a full store (`<worker>: <reason>`), until a "
        "probe writes (workers.store_full).",
    )
    workers: list[WorkerStatus]
    tunings: list[TuningStatus]
    llm_limits: list[LlmLimit] = Field(
        default_factory=list, description="LLM providers running below their `concurrency` after a 429."
    )

    def running_words(self) -> str:
        """`3 cases, 24 evaluation items`: what runs now, by kind (empty when nothing does)."""
        parts = []
        for kind, one in RUNNING_WORDS.items():
            count = self.running_by_kind.get(kind, 0)
            if count:
                parts.append(f"{count} {one}{'' if count == 1 else 's'}")
        return ", ".join(parts)


class ResultRow(BaseModel):
    case: str
    rev: int
    state: str
    reason: str | None = None
    tokens: int = 0
    estimated_tokens: int = Field(default=0, description="Of `tokens`, those the fleet estimated.")
    unmeasured_tokens: int = Field(default=0, description="Of `tokens`, those only the agents counted.")
    cost_usd: float = 0.0
    held: str | None = Field(
        default=None, description="Unfinished, and waiting: the reason its tuning is held."
    )
    flaky: bool = Field(default=False, description="Its graded runs on one version disagreed (CaseResult).")


class AttemptView(BaseModel):
    phase: Phase
    attempt: int
    folder: str
    run: RunRecord | None = None
    feedback: Feedback | None = None
    apply: ApplyRecord | None = None
    analysis: str | None = None


class CaseDetail(BaseModel):
    tuning: str
    case: str
    rev: int
    result: dict[str, Any] | None
    attempts: list[AttemptView]
    handbacks: list[Handback] = Field(
        default_factory=list,
        description="Its hand-backs for a provider outage, and what each cut short.",
    )


class Refusal(BaseModel):
    file: str
    error: str


class SubmitReport(BaseModel):
    accepted: list[str] = Field(default_factory=list, description="case@rev enqueued now.")
    duplicates: list[str] = Field(default_factory=list, description="case@rev already queued or done.")
    refused: list[Refusal] = Field(default_factory=list)
    held_out: list[str] = Field(
        default_factory=list, description="case@rev not submitted: held out, never tuned on (`holdout`)."
    )
    at: datetime | None = None
