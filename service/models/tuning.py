"""A tuning's configuration file: the system, the cases, the limits and the three adapters."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.models.case import Slug

PLACEHOLDERS: dict[str, frozenset[str]] = {
    "runner": frozenset(
        {
            "case",
            "input",
            "system",
            "memory",
            "workspace",
            "output",
            "attempt_dir",
            "version",
            "phase",
            "attempt",
            "expected_skills",
        }
    ),
    "analyzer": frozenset(
        {
            "case",
            "run",
            "system",
            "memory",
            "workspace",
            "brief",
            "feedback",
            "analysis",
            "attempt_dir",
            "phase",
            "attempt",
        }
    ),
    "applier": frozenset({"case", "feedback", "worktree", "output", "attempt_dir", "phase", "attempt"}),
}
"""The `{name}` placeholders each role's argv may use (a literal brace is written `{{` or `}}`)."""

SANDBOX_UNAVAILABLE_EXIT = 75
"""The default exit code with which a runner says the sandbox is unavailable (EX_TEMPFAIL)."""


class StepLatency(BaseModel):
    """Simulated duration of each demo step, in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    run_ms: int = Field(default=300, ge=0)
    analyze_ms: int = Field(default=150, ge=0)
    apply_ms: int = Field(default=100, ge=0)


class DemoAdapter(BaseModel):
    """The built-in simulated agent / meta agent / applier, deterministic for a seed."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["demo"] = "demo"
    seed: int = 0
    latency: StepLatency = Field(default_factory=StepLatency)
    jitter: float = Field(default=0.0, ge=0, le=1, description="Share of latency varied by the seed.")
    usd_per_1k_tokens: float = Field(default=0.002, ge=0)
    void_rate: float = Field(default=0.0, ge=0, le=1, description="Extra share of runs found void, seeded.")
    outage_file: Path | None = Field(
        default=None,
        description="While this file exists the demo sandbox is down: runs and probes fail.",
    )


class SandboxConfig(BaseModel):
    """A wrapper around the runner's command, and the probe that tells whether it works."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["none", "bubblewrap", "podman", "docker"] = "none"
    image: str | None = Field(default=None, description="Container image (podman, docker).")
    extra_args: list[str] = Field(default_factory=list, description="Added to the wrapper's own arguments.")
    probe_argv: list[str] | None = Field(
        default=None, description="Overrides the default probe; exit 0 means the sandbox works."
    )
    probe_timeout_s: float = Field(default=20.0, gt=0)


class CommandAdapter(BaseModel):
    """An agent CLI run as a subprocess from an argv template (never a shell string).

    Placeholders in `argv` are written `{name}`; which names exist depends on the step
    (see docs/adapters.md).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["command"] = "command"
    argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=1800.0, gt=0)
    sandbox_exit_code: int = Field(default=SANDBOX_UNAVAILABLE_EXIT, ge=1, le=255)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)


Adapter = Annotated[DemoAdapter | CommandAdapter, Field(discriminator="kind")]


class TuningConfig(BaseModel):
    """`tuning.yaml`: one system, one data set, one config."""

    model_config = ConfigDict(extra="forbid")

    name: Slug
    system: Path = Field(description="A folder (or git repository) with the initial instructions.")
    cases: Path = Field(description="A folder of case files (*.yaml, *.yml, *.json).")
    tries: int = Field(default=3, ge=1, le=100)
    mem_tries: int = Field(default=2, ge=1, le=100)
    max_voids: int = Field(default=3, ge=1, description="Void runs in a row before the case ends failed.")
    runner: Adapter = Field(default_factory=DemoAdapter)
    analyzer: Adapter = Field(default_factory=DemoAdapter)
    applier: Adapter = Field(default_factory=DemoAdapter)
    remote: str | None = Field(default=None, description="A git remote to mirror published versions to.")
    remote_branch: str = "tunefleet"

    @model_validator(mode="after")
    def _known_placeholders(self) -> TuningConfig:
        for role, names in PLACEHOLDERS.items():
            adapter = getattr(self, role)
            if not isinstance(adapter, CommandAdapter):
                continue
            for index, element in enumerate(adapter.argv):
                try:
                    fields = [f for _, f, _, _ in string.Formatter().parse(element) if f is not None]
                except ValueError as exc:
                    raise ValueError(
                        f"{role}.argv[{index}]: {exc} (write a literal brace as {{{{ or }}}})"
                    ) from exc
                unknown = sorted(set(fields) - names)
                if unknown:
                    known = ", ".join(sorted(names))
                    raise ValueError(
                        f"{role}.argv[{index}]: unknown placeholder {{{unknown[0]}}}; known: {known}"
                    )
        return self
