"""The contract between the loop and the three agents it drives: runner, analyzer, applier.

Every adapter is async and cancellable: cancelling the coroutine ends the agent's processes
(TERM, then KILL after the grace period) before the cancellation propagates.

An adapter hands its results back as they were written (the JSON bytes of a feedback or an apply
output, the report's text) and the steps validate them, so a command adapter and the demo adapter
are held to the same schema. The files an agent process works with (its inputs, its HOME, the
output files it writes) are the command adapters' business: they make them in the step's own
folder before the process starts and read them back after it ends (workers.adapters.folder).
The in-process demo adapters take everything from the request and write only what the loop keeps
(the run's memory, its log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from service.core.models.case import Case, DemoMapping, RunTask
from service.core.models.guards import SizeBudget
from service.core.models.records import SEAL_FIELDS, Feedback, Phase, RunOutput, RunRecord, Usage
from workers.errors import KeyRefused, ProviderDown


class StepRequest(BaseModel):
    """What every step of every adapter knows about where it is.

    `step_dir` is the step's own fresh folder for this attempt and this lease: an agent process gets
    paths inside it (and the read-only inputs of its role), never the attempt folder where the fleet
    keeps its records. `attempt_dir` and `demo` are for the in-process demo adapters only; a command
    adapter never passes them to its process.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tuning: str
    case_id: str
    phase: Phase
    attempt: int = Field(ge=1)
    attempt_dir: Path = Field(description="The attempt's folder of records (in-process adapters only).")
    step_dir: Path = Field(description="The step's own folder for this attempt and lease.")
    log_file: Path = Field(description="The agent's stdout and stderr, appended line by line.")
    demo: DemoMapping = Field(description="The case's demo mapping, for the in-process demo adapters only.")
    rev: int = Field(default=1, ge=1, description="The case's revision.")
    repeat: NonNegativeInt = Field(
        default=0,
        description="The evaluation item's repeat (its attempt too); 0 for a try of the case's own loop. "
        "With the rest, it seeds the demo agents' draws (workers.adapters.demo_chance).",
    )
    evaluation: str | None = Field(
        default=None,
        description="A gate's evaluation, for its items (None otherwise). It seeds the demo agents' draws "
        "too: a gate's rounds are evaluations of their own whose repeats start at 1 again, and must draw "
        "afresh; two evaluations a user asks for on one version draw alike.",
    )


class RunRequest(StepRequest):
    """Run the agent on the case, on a read-only snapshot of one system version."""

    task: RunTask = Field(description="What the runner may see of the case: never its rubric.")
    run_index: int = Field(ge=1, description="1 for the try's first run, +1 for each run set aside.")
    version: str
    system_dir: Path = Field(description="Read-only snapshot of the system version.")
    memory_dir: Path = Field(description="Memory to start from (none in phase nomem); the run may write it.")
    workspace_dir: Path = Field(description="An empty folder for the agent (made by a command runner).")
    expected_skills: list[str] = Field(default_factory=list)


class EarlierTry(BaseModel):
    """What an analyzer is told of one earlier try of the case."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase
    attempt: int
    verdict: str
    rubric: dict[str, float]
    summary: str
    rejected: str | None = Field(
        default=None,
        description="The apply after this try was rejected by the acceptance gate: its edit and the cases it "
        "broke.",
    )
    same_version: bool = Field(
        default=False,
        description="This try ran in the same phase on the same version as the run being graded: if it "
        "passed and this run failed, the agent (or its grader) is random here, not wrong by the prose.",
    )


class AnalyzeRequest(StepRequest):
    """Grade one run against the case's rubric."""

    case: Case
    run: RunRecord
    system_dir: Path = Field(
        description="The run's system version: the shared snapshot (trusted analyzers) "
        "or a private copy whose edits are discarded."
    )
    memory_dir: Path = Field(description="The run's memory (a private copy for an agent process).")
    workspace_dir: Path = Field(description="The run's workspace (read-only for an agent process).")
    earlier: list[EarlierTry] = Field(default_factory=list, description="The earlier tries, in loop order.")

    def brief(self) -> dict[str, Any]:
        """The case, this run and the earlier tries' feedback, as `brief.json` holds them."""
        return {
            "case": self.case.model_dump(mode="json"),
            "phase": self.phase,
            "attempt": self.attempt,
            "run": self.run.model_dump(mode="json", exclude=set(SEAL_FIELDS)),
            "missed_skills": self.run.missed_skills,
            "earlier": [e.model_dump() for e in self.earlier],
        }


class ApplyRequest(StepRequest):
    """Edit the system in a private folder according to an analysis's prose improvements."""

    case: Case
    feedback: Feedback
    worktree_dir: Path = Field(
        description="A private writable copy of the current version: edit it in place."
    )
    budget: SizeBudget | None = Field(
        default=None, description="The size budgets the tuning's guards set (none without guards)."
    )


class ProcessEnd(BaseModel):
    """How an agent's process ended, in every role: its exit code, how long it ran, and whether it was a
    step at all (a sandbox or a provider down, a refused key: no step, nothing graded)."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    duration_ms: NonNegativeInt
    timed_out: bool = Field(
        default=False, description="Ended at its timeout (a runner's run is still graded)."
    )
    sandbox_down: str | None = Field(default=None, description="The sandbox could not run the agent.")
    provider_down: str | None = Field(
        default=None,
        description="The model's provider stayed down through its retries: the job is handed back, no try "
        "spent.",
    )
    key_refused: str | None = Field(
        default=None, description="The model's provider refused its key (401, 403): the tuning is held."
    )
    spent: Usage | None = Field(
        default=None,
        description="What the fleet measured the agent's LLM calls to spend, whatever came of them (a "
        "run's own usage is in its output; this is a run's only when there was no run).",
    )

    def raise_if_stopped(self, agent: str) -> None:
        """ProviderDown when the agent's provider stayed down, KeyRefused when it refused the key: not the
        job's fault, so no try is spent (the job is handed back, or its tuning held). `agent` names it in
        the message (`the runner`)."""
        if self.provider_down is not None:
            raise ProviderDown(f"{agent}'s {self.provider_down}")
        if self.key_refused is not None:
            raise KeyRefused(f"{agent}'s {self.key_refused}")


class RunOutcome(ProcessEnd):
    """How the runner's process ended."""

    output: RunOutput | None = Field(default=None, description="None when the run was void or never ran.")
    void: str | None = Field(default=None, description="Why the run says nothing about the prose.")
    log_tail: str | None = Field(
        default=None, description="The end of the runner's log, when it did not end by itself with exit 0."
    )


class StepExit(ProcessEnd):
    """How an analyzer's, applier's or goal agent's process ended."""

    error: str | None = None


class AnalyzeOutcome(BaseModel):
    """An analysis as the analyzer wrote it; the step validates the feedback."""

    model_config = ConfigDict(extra="forbid")

    exit: StepExit
    feedback: bytes | None = Field(default=None, description="The Feedback JSON; None if none was written.")
    analysis: bytes | None = Field(default=None, description="The report for people (Markdown), if any.")
    source: str = Field(description="Where the feedback comes from (its file), for error messages.")


class ApplyOutcome(BaseModel):
    """An apply as the applier reported it; the step validates the output."""

    model_config = ConfigDict(extra="forbid")

    exit: StepExit
    output: bytes | None = Field(default=None, description="The ApplyOutput JSON; None if none was written.")
    source: str = Field(description="Where the output comes from (its file), for error messages.")


class Runner(Protocol):
    async def run(self, request: RunRequest) -> RunOutcome: ...


class Analyzer(Protocol):
    trusted: bool
    """In-process code known never to edit its inputs: it may read the shared snapshot and the run's
    memory directly. An agent process is not trusted: it gets private copies, and its edits are
    reported and discarded."""

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome: ...


class Applier(Protocol):
    async def apply(self, request: ApplyRequest) -> ApplyOutcome: ...


class Prober(Protocol):
    async def probe(self) -> str | None:
        """None when the sandbox works, else why it does not."""
        ...
