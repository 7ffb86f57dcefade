"""What each step leaves in an attempt's folder, and what a finished case leaves in its own.

Agents write `RunOutput`, `Feedback` and `ApplyOutput` into their own step folders; their JSON
Schemas (`tunefleet schema`) are the adapter contract. The records in the attempt folder
(`run.json`, `feedback.json`, `apply.json`) are written by the fleet alone, and chained by seals:
each record carries a random seal drawn when the fleet wrote it, and the next step's record names
the seal of the record it was made from. An agent ends before the record after it is written, so
it cannot know the seal that record will carry: a record it forged is never taken for the
fleet's (see docs/adapters.md, "Sealed steps").
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    RootModel,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

from service.core.models.case import Slug, State

Phase = Literal["nomem", "mem"]
Verdict = Literal["pass", "fail", "void"]
StepName = Literal["run", "analyze", "apply"]


SEAL_FIELDS = frozenset({"seal", "after", "run_seal", "feedback_seal"})
"""The fleet-only fields of the records: never in what an agent is given (`model_dump(exclude=...)`)."""


def new_seal() -> str:
    """A seal for a record the fleet writes: random, so no agent can know it in advance."""
    return uuid.uuid4().hex


def utc_now() -> datetime:
    """The time a record is made: now, in UTC (a record read back keeps the time it was written with)."""
    return datetime.now(UTC)


AGENT_TEXT_MAX_CHARS = 64 * 1024
"""The most of one text an agent wrote that the fleet keeps (a summary, an answer, a change): its
records, notes, events and API answers stay small whatever an agent writes."""


def cap_text(text: str) -> str:
    """`text`, or its beginning with a note that the fleet truncated it, within AGENT_TEXT_MAX_CHARS."""
    if len(text) <= AGENT_TEXT_MAX_CHARS:
        return text
    note = f" […truncated by the fleet: {len(text):,} characters, {AGENT_TEXT_MAX_CHARS:,} kept]"
    return text[: AGENT_TEXT_MAX_CHARS - len(note)] + note


AgentText = Annotated[str, AfterValidator(cap_text)]
"""A text an agent wrote, capped as it is read (`cap_text`)."""


UsageSource = Literal["api", "estimated", "envelope", "agent"]
"""Who counted a step's tokens: `api` the fleet's own LLM adapter, from the server's replies;
`estimated` the fleet's LLM adapter, by tokenizing what was sent and answered where the server gave no
usage (an answer without it, a call that timed out: billed all the same); `envelope` the runner's
wrapper, from the agent CLI's own usage report (the user's configured code, not the agent inside it);
`agent` nobody but the agent itself (its own word, unmeasured)."""


COST_SCALE = 1_000_000
"""Cost is counted in micro-dollars so that Redis can add it atomically as an integer."""


class Usage(BaseModel):
    """Tokens and money one step spent, or a sum of steps (`+`), and who counted them."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    cost_usd: NonNegativeFloat = 0.0
    source: UsageSource | None = Field(
        default="agent",
        description="Who counted these tokens: 'api' (the fleet's LLM adapter, from the server's usage), "
        "'estimated' (the fleet's LLM adapter, all of them estimated), 'envelope' (the runner's wrapper, "
        "from the agent CLI's own usage report), 'agent' (the agent's own word); null in a sum of steps "
        "whose sources differ. Left out, a step's usage is the agent's word.",
    )
    estimated_tokens: NonNegativeInt = Field(
        default=0,
        description="Of the tokens, those the fleet estimated (no usage in the server's answer, or a call "
        "that timed out): all of them with source 'estimated', none with 'envelope' or 'agent'.",
    )
    cached_input_tokens: NonNegativeInt = Field(
        default=0, description="Of the input tokens, those the provider served from its prompt cache."
    )
    unmeasured_tokens: NonNegativeInt = Field(
        default=0,
        description="The tokens only the agent counted (source 'agent'). Derived from `source` when it is "
        "set; kept as given only in a sum whose sources differ.",
    )

    @model_validator(mode="after")
    def _derive_unmeasured(self) -> Usage:
        if self.source is not None:
            self.unmeasured_tokens = self.tokens if self.source == "agent" else 0
        if self.source == "estimated":
            self.estimated_tokens = self.tokens
        elif self.source in ("agent", "envelope"):
            self.estimated_tokens = 0
        self.estimated_tokens = min(self.estimated_tokens, self.tokens)
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written as before when the agent's word (source `agent`); `unmeasured_tokens` only in a sum
        whose sources differ (elsewhere `source` gives it)."""
        data: dict[str, Any] = handler(self)
        if self.source is not None:
            data.pop("unmeasured_tokens", None)
        for derived in ("estimated_tokens", "cached_input_tokens"):
            if not data.get(derived):
                data.pop(derived, None)
        if self.source == "agent":
            data.pop("source", None)
        return data

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def measured_tokens(self) -> int:
        """The tokens a server or a wrapper counted: neither estimated nor only the agent's word."""
        return max(0, self.tokens - self.estimated_tokens - self.unmeasured_tokens)

    def event_counts(self) -> dict[str, int | float]:
        """What the event of a step that spent this carries of it (the tuning's counters add these up)."""
        return {
            "tokens": self.tokens,
            "unmeasured_tokens": self.unmeasured_tokens,
            "estimated_tokens": self.estimated_tokens,
            "cost_usd": self.cost_usd,
        }

    def __add__(self, other: Usage) -> Usage:
        """The sum; its source is the one source of the parts that spent anything, null when they differ."""
        sources = {u.source for u in (self, other) if u.tokens or u.cost_usd} or {self.source}
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
            source=sources.pop() if len(sources) == 1 else None,
            unmeasured_tokens=self.unmeasured_tokens + other.unmeasured_tokens,
            estimated_tokens=self.estimated_tokens + other.estimated_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


class RunOutput(BaseModel):
    """What a runner writes to its `output` file."""

    model_config = ConfigDict(extra="forbid")

    answer: AgentText = Field(default="", description="The agent's final answer.")
    turns: NonNegativeInt = 0
    skills_loaded: list[str] = Field(default_factory=list, description="Skills the agent loaded.")
    error: AgentText | None = Field(default=None, description="Set when the agent itself failed.")
    usage: Usage = Field(default_factory=Usage)


class RunRecord(BaseModel):
    """`run.json`: one run of the agent on a case."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="The system commit the run worked on.")
    work: str = Field(description="The run's own folder in the attempt (memory, workspace, log).")
    started_at: datetime
    duration_ms: NonNegativeInt
    exit_code: int
    void: str | None = Field(default=None, description="Why the run says nothing about the prose.")
    timed_out: bool = Field(
        default=False, description="The runner was ended at its timeout: a run all the same, graded."
    )
    log_tail: str | None = Field(
        default=None,
        description="The last lines of the runner's log (at most 4 KiB) when it did not end by itself "
        "with exit 0: timed out, killed, or without output.",
    )
    output: RunOutput = Field(default_factory=RunOutput)
    missed_skills: list[str] = Field(default_factory=list)
    memory_in: bool = Field(default=False, description="The run started from a copy of a memory.")
    seal: str | None = Field(default=None, description="Drawn by the fleet when it wrote this record.")
    after: str | None = Field(
        default=None,
        description="The seal of the record the run followed: the previous try's apply, or the passing "
        "feedback that the memory phase starts from (None for the first try).",
    )


class Improvement(BaseModel):
    """One change an analysis proposes: to the prose (the system) or to the dataset (the case)."""

    model_config = ConfigDict(extra="forbid")

    target: Literal["prose", "dataset"]
    change: AgentText = Field(min_length=1, description="What to change; its first line is the lead.")

    @property
    def lead(self) -> str:
        return self.change.strip().splitlines()[0].strip()


class Feedback(BaseModel):
    """`feedback.json`: the meta agent's grading of one run."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    done: bool = Field(description="The case passed: no further try in this phase.")
    rubric: dict[str, float] = Field(default_factory=dict, description="Rubric item id -> score in 0..1.")
    improvements: list[Improvement] = Field(default_factory=list)
    summary: AgentText = ""
    infra: AgentText | None = Field(default=None, description="With verdict void: what broke.")
    usage: Usage = Field(default_factory=Usage)
    run_seal: str | None = Field(
        default=None, description="Set by the fleet when it records: the seal of the run graded."
    )
    seal: str | None = Field(default=None, description="Set by the fleet when it records this feedback.")

    def dataset_only(self) -> str | None:
        """The `specification: ...` reason when every finding targets the case and none the prose."""
        dataset = [i for i in self.improvements if i.target == "dataset"]
        if not dataset or any(i.target == "prose" for i in self.improvements):
            return None
        return "specification: " + "; ".join(i.lead for i in dataset)

    def prose(self) -> list[Improvement]:
        return [i for i in self.improvements if i.target == "prose"]


class ApplyOutput(BaseModel):
    """What an applier writes to its `output` file after editing the worktree."""

    model_config = ConfigDict(extra="forbid")

    structural: AgentText | None = Field(default=None, description="A change it must not make by itself.")
    skills: list[str] = Field(default_factory=list, description="Skills the next run should load.")
    summary: AgentText = ""
    usage: Usage = Field(default_factory=Usage)


GateVerdict = Literal["passed", "rejected"]


class GateSummary(BaseModel):
    """What `apply.json` keeps of the acceptance gate that judged the apply (its evidence: `gate.json`,
    service.kinds.evals.gate.models)."""

    model_config = ConfigDict(extra="forbid")

    verdict: GateVerdict
    candidate: str = Field(description="The candidate judged (for a rebased publish: the one first made).")
    eval: str | None = None
    broken: list[str] = Field(default_factory=list)
    rebased: bool = Field(default=False, description="Published on top of a newer current version.")
    why: str = ""


class ApplyRecord(BaseModel):
    """`apply.json`: the result of applying one analysis's prose improvements."""

    model_config = ConfigDict(extra="forbid")

    base_version: str
    version: str | None = Field(description="The published commit, or None when nothing changed.")
    output: ApplyOutput
    fence: int = Field(description="The improvements lock's fencing token the apply held.")
    duration_ms: NonNegativeInt = 0
    feedback_seal: str | None = Field(default=None, description="The seal of the feedback applied.")
    seal: str | None = Field(default=None, description="Drawn by the fleet when it wrote this record.")
    gate: GateSummary | None = Field(
        default=None, description="The acceptance gate's verdict, when the tuning has a gate."
    )

    @property
    def rejected(self) -> bool:
        return self.gate is not None and self.gate.verdict == "rejected"


class Spend(BaseModel):
    """A line of a case's `spent.jsonl`: usage that no record keeps (an analyzer round whose feedback
    was refused, an apply abandoned after its lock was lost), so that the case's spend counts it."""

    model_config = ConfigDict(extra="forbid")

    at: datetime = Field(default_factory=utc_now)
    phase: Phase
    attempt: int = Field(ge=1)
    step: StepName
    usage: Usage
    why: str = Field(description="Why no record keeps this usage.")


class Handback(BaseModel):
    """A line of a case's `handbacks.jsonl`: the case went back to the queue because its LLM provider
    stayed down (workers.handback.provider_down), and what the step cut short had spent (also in the
    case's ledger, `spent.jsonl`, where its spend counts)."""

    model_config = ConfigDict(extra="forbid")

    at: datetime = Field(default_factory=utc_now)
    count: int = Field(ge=1, description="The job's hand-backs in a row so far (provider_handbacks_max).")
    error: AgentText
    usage: Usage = Field(default_factory=Usage)


class SandboxTrips(BaseModel):
    """`sandbox-trips.json`: how often a case's runner reported its sandbox down with nothing to probe."""

    model_config = ConfigDict(extra="forbid")

    trips: NonNegativeInt = 0


TryKey = Annotated[str, StringConstraints(pattern=r"^(nomem|mem)-[1-9][0-9]*$")]
"""One try of a case: `<phase>-<attempt>`, e.g. `nomem-1`."""


class VoidBaseline(RootModel[dict[TryKey, Annotated[int, Field(ge=0)]]]):
    """`void-baseline.json`: per try, the void runs already counted when the case last ended failed for
    voids, so that running it again starts a fresh count (workers.kinds.cases.loop)."""


class CancelRequest(BaseModel):
    """A cancel, written into the store at once by whoever cancels (the CLI, the API, the client), so
    that it outlives Redis: the worker holding the job ends it `cancelled`, or the next one to take it.
    A goal keeps it in its state; a running case in its folder's `cancel.json`."""

    model_config = ConfigDict(extra="forbid")

    at: datetime = Field(default_factory=utc_now)


class CaseResult(BaseModel):
    """`result.json`: how a case ended."""

    model_config = ConfigDict(extra="forbid")

    case: Slug
    rev: int
    state: State
    phase: Phase | None = None
    reason: AgentText | None = None
    at: datetime = Field(default_factory=utc_now)
    usage: Usage = Field(default_factory=Usage)
    steps: NonNegativeInt = Field(default=0, description="Recorded steps (runs, analyses, applies).")
    flaky: bool = Field(
        default=False,
        description="Graded runs of one phase on one version disagreed (one passed, another failed): "
        "the agent or its grader is random on this case, whatever the instructions say.",
    )
    handbacks: int = Field(
        default=0,
        ge=0,
        description="How often an LLM provider outage handed the case back (handbacks.jsonl).",
    )
    handback_usage: Usage = Field(
        default_factory=Usage,
        description="What the steps those hand-backs cut short had spent (in `usage` too).",
    )


class Note(BaseModel):
    """A line of a case's `notes.jsonl`: a grading, a difficulty, or something the fleet dropped from
    an agent's answer (unknown rubric ids), worth keeping with the case."""

    model_config = ConfigDict(extra="forbid")

    at: datetime = Field(default_factory=utc_now)
    kind: Literal["graded", "difficult", "failed", "dropped"]
    rev: int
    phase: Phase | None = None
    attempt: int | None = None
    verdict: Verdict | None = None
    rubric: dict[str, float] = Field(default_factory=dict)
    text: AgentText
    worker: str | None = None
    seal: str | None = None
    """A grading's: the seal of the feedback it notes (a worker that resumes the try writes the note if
    the worker before it died between the record and its note)."""
