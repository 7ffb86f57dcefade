"""The contract between the loop and the three agents it drives: runner, analyzer, applier.

Every adapter is async and cancellable: cancelling the coroutine ends the agent's processes
(TERM, then KILL after the grace period) before the cancellation propagates.
Adapters write their results into files; the steps read and validate those files, so a command
adapter and the demo adapter are held to the same schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from service.models.case import Case
from service.models.records import Feedback, Phase, RunOutput, RunRecord


class StepRequest(BaseModel):
    """What every step of every adapter knows about where it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tuning: str
    case: Case
    phase: Phase
    attempt: int = Field(ge=1)
    case_file: Path = Field(description="The case as JSON, in the store.")
    attempt_dir: Path
    log_file: Path = Field(description="The agent's stdout and stderr, appended line by line.")


class RunRequest(StepRequest):
    """Run the agent on the case, on a read-only snapshot of one system version."""

    run_index: int = Field(ge=1, description="1 for the try's first run, +1 for each run set aside.")
    version: str
    system_dir: Path = Field(description="Read-only snapshot of the system version.")
    memory_dir: Path = Field(description="Memory to start from (empty in phase nomem); the run may write it.")
    workspace_dir: Path = Field(description="An empty folder for the agent's files.")
    input_file: Path = Field(description="JSON: {input: str, case: str, rev: int}.")
    output_file: Path = Field(description="Where the runner writes its RunOutput JSON.")
    expected_skills: list[str] = Field(default_factory=list)


class RunOutcome(BaseModel):
    """How the runner's process ended."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    duration_ms: int = Field(ge=0)
    output: RunOutput | None = Field(default=None, description="None when the run was void or never ran.")
    void: str | None = Field(default=None, description="Why the run says nothing about the prose.")
    sandbox_down: str | None = Field(default=None, description="The sandbox was unavailable: not a run.")


class AnalyzeRequest(StepRequest):
    """Grade one run against the case's rubric."""

    run: RunRecord
    run_file: Path
    system_dir: Path = Field(description="A private copy of the run's system version; edits are discarded.")
    memory_dir: Path
    workspace_dir: Path
    brief_file: Path = Field(description="JSON: the case, this run, and the earlier tries' feedback.")
    feedback_file: Path = Field(description="Where the analyzer writes its Feedback JSON.")
    analysis_file: Path = Field(description="Where the analyzer writes its human report (Markdown).")


class ApplyRequest(StepRequest):
    """Edit the system in a private worktree according to an analysis's prose improvements."""

    feedback: Feedback
    feedback_file: Path
    worktree_dir: Path = Field(description="A git worktree of the current version: edit it in place.")
    output_file: Path = Field(description="Where the applier writes its ApplyOutput JSON.")


class StepExit(BaseModel):
    """How an analyzer's or applier's process ended; its result is in the files it wrote."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    duration_ms: int = Field(ge=0)
    timed_out: bool = False
    error: str | None = None


class Runner(Protocol):
    async def run(self, request: RunRequest) -> RunOutcome: ...


class Analyzer(Protocol):
    trusted: bool
    """In-process code known never to edit its inputs: it may read the shared snapshot and the run's
    memory directly. An agent process is not trusted: it gets private copies, and its edits are
    reported and discarded."""

    async def analyze(self, request: AnalyzeRequest) -> StepExit: ...


class Applier(Protocol):
    async def apply(self, request: ApplyRequest) -> StepExit: ...


class Prober(Protocol):
    async def probe(self) -> str | None:
        """None when the sandbox works, else why it does not."""
        ...
