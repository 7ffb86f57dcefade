"""A tuning's configuration file: the system, the cases, the limits and the three adapters."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    model_validator,
)

from service.core.models.acceptance import GateConfig
from service.core.models.case import Slug
from service.core.models.guards import GuardsConfig
from service.core.models.holdout import HoldoutConfig
from service.core.models.redis_value import RedisValue
from service.core.validation import FieldErrors, did_you_mean

PLACEHOLDERS: dict[str, frozenset[str]] = {
    "runner": frozenset(
        {
            "input",
            "system",
            "memory",
            "workspace",
            "home",
            "output",
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
            "home",
            "brief",
            "feedback",
            "analysis",
            "phase",
            "attempt",
        }
    ),
    "applier": frozenset({"feedback", "worktree", "home", "output", "phase", "attempt"}),
}
"""The `{name}` placeholders each role's argv may use (a literal brace is written `{{` or `}}`).
Each role is given only the paths of its own inputs and outputs (docs/adapters.md, "What each role sees")."""

WITHHELD: dict[str, str] = {
    "case": "the runner never sees the case as the store keeps it (its rubric grades the run): "
    "use {input}, the task without the rubric",
    "attempt_dir": "no agent gets the attempt's folder, where the fleet keeps its records: use the "
    "paths of the role's own files",
}
"""Placeholders an earlier contract had and why a role no longer gets them, for the error message."""

SANDBOX_UNAVAILABLE_EXIT = 75
"""The default exit code with which a runner says the sandbox is unavailable (EX_TEMPFAIL)."""


class StepLatency(BaseModel):
    """Simulated duration of each demo step, in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    run_ms: NonNegativeInt = 300
    analyze_ms: NonNegativeInt = 150
    apply_ms: NonNegativeInt = 100


class DemoAdapter(BaseModel):
    """The built-in simulated agent / meta agent / applier, deterministic for a seed (its draws too:
    workers.adapters.demo_chance)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["demo"] = "demo"
    seed: int = 0
    latency: StepLatency = Field(default_factory=StepLatency)
    jitter: NonNegativeFloat = Field(default=0.0, le=1, description="Share of latency varied by the seed.")
    usd_per_1k_tokens: NonNegativeFloat = 0.002
    void_rate: NonNegativeFloat = Field(
        default=0.0, le=1, description="Extra share of runs found void, seeded."
    )
    judge_flip: NonNegativeFloat = Field(
        default=0.0,
        le=1,
        allow_inf_nan=False,
        description="The analyzer's: the probability that its pass or fail verdict is flipped, seeded.",
    )
    outage_file: Path | None = Field(
        default=None,
        description="While this file exists the demo sandbox is down: runs and probes fail.",
    )


class AgentLimits(BaseModel):
    """Resource limits of one agent step (None: no limit). Memory and processes are enforced by a
    per-step cgroup where the worker's settings name cgroup folders (`cgroup_dirs`), else by
    `setrlimit` (RLIMIT_AS, RLIMIT_NPROC: counted per user, and not enforced for root); containers use
    their own options (`--memory`, `--pids-limit`, `--ulimit`)."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int | None = Field(default=None, ge=16, description="Memory of the step's processes.")
    processes: int | None = Field(default=None, ge=8, description="Processes and threads at once.")
    file_size_mb: int | None = Field(default=None, ge=1, description="The largest file it may write.")
    open_files: int | None = Field(default=None, ge=16, description="Files it may hold open at once.")
    tmp_mb: int = Field(default=1024, ge=1, description="Size of the sandbox's private /tmp (bubblewrap).")


class SandboxConfig(BaseModel):
    """Where an agent's process runs: its sandbox, its network, its limits, and the probe that tells
    whether the sandbox works (the runner's probe drives the fleet's breaker)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["none", "bubblewrap", "podman", "docker"] = "none"
    image: str | None = Field(default=None, description="Container image (podman, docker).")
    network: bool = Field(
        default=False,
        description="Whether the agent can reach the network. Off by default: the agent gets a network "
        "namespace of its own with nothing in it (bubblewrap, containers, and `none` when the worker runs "
        'as root); docs/adapters.md, "What each agent receives".',
    )
    readonly_paths: list[Path] = Field(
        default_factory=list,
        description="More host paths the agent may read (its own installation, say); bubblewrap and "
        "containers show nothing else of the host but the system's /usr, /bin, /lib* and /etc essentials.",
    )
    limits: AgentLimits = Field(default_factory=AgentLimits)
    extra_args: list[str] = Field(default_factory=list, description="Added to the wrapper's own arguments.")
    probe_argv: list[str] | None = Field(
        default=None, description="Overrides the default probe; exit 0 means the sandbox works."
    )
    probe_timeout_s: PositiveFloat = 20.0


def _env_entries(value: object) -> object:
    """`env` as a mapping of name to its set value, or None for the worker's value: from a list of `NAME`
    and `NAME=VALUE` entries, or from a mapping of names to values."""
    if isinstance(value, list):
        entries: dict[str, str | None] = {}
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise ValueError(f"env[{index}]: expected NAME or NAME=VALUE, not {type(item).__name__}")
            name, sep, given = item.partition("=")
            entries[name] = given if sep else None
        value = entries
    if isinstance(value, dict):
        for name in value:
            if not isinstance(name, str) or not re.fullmatch(ENV_NAME_RE, name):
                raise ValueError(f"env: {name!r} is not a variable name (letters, digits, _)")
            if name.startswith("TUNEFLEET_"):
                raise ValueError(f"env: {name} is one of the fleet's own settings: no agent gets them")
    return value


class CommandAdapter(BaseModel):
    """An agent CLI run as a subprocess from an argv template (never a shell string).

    Placeholders in `argv` are written `{name}`; which names exist depends on the step
    (see docs/adapters.md).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["command"] = "command"
    argv: list[str] = Field(min_length=1)
    timeout_s: PositiveFloat = 1800.0
    sandbox_exit_code: int = Field(default=SANDBOX_UNAVAILABLE_EXIT, ge=1, le=255)
    env: Annotated[dict[str, str | None], BeforeValidator(_env_entries)] = Field(
        default_factory=dict,
        description="The variables the agent gets besides the base (PATH, HOME, LANG, TZ, ...): a list of "
        "NAME (the worker's value, if it has one) or NAME=VALUE (that value); a mapping NAME: VALUE is "
        "read as NAME=VALUE. Nothing else of the worker's environment reaches the agent.",
    )
    cwd: Path | None = None
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)


ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ModelPrice(BaseModel):
    """What one model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_usd_per_1m: NonNegativeFloat = Field(description="USD per 1M input (prompt) tokens.")
    output_usd_per_1m: NonNegativeFloat = Field(description="USD per 1M output (completion) tokens.")
    cached_input_usd_per_1m: float | None = Field(
        default=None,
        ge=0,
        description="USD per 1M input tokens the provider served from its prompt cache "
        "(`prompt_tokens_details.cached_tokens`); None: the input price.",
    )


class LlmAdapter(BaseModel):
    """A role answered by a model over the OpenAI-compatible Chat Completions API, in the worker's own
    process: the meta agent (analyzer, applier) or a single-prompt runner (see docs/adapters.md, "The
    LLM meta agent").

    The API key is read, when a step runs, from the environment variable named by `api_key_env`: the
    key itself is never part of the tuning, the store or a log.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["llm"] = "llm"
    base_url: str = Field(default="https://api.openai.com/v1", min_length=1)
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(
        default="OPENAI_API_KEY",
        pattern=ENV_NAME_RE,
        description="The name of the variable holding the key; None for a server that needs none.",
    )
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)
    timeout_s: PositiveFloat = Field(default=300.0, description="One HTTP call, not the whole step.")
    max_retries: NonNegativeInt = Field(default=4, le=20, description="Calls tried again after the first.")
    timeouts_max: int = Field(
        default=2,
        ge=1,
        description="Timeouts of one call, while the provider answers other calls, after which its "
        "step fails (the case's own fault, not an outage).",
    )
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = Field(
        default="auto",
        description="How JSON answers are asked for: `json_schema` (response_format json_schema), "
        "`json_object` (JSON mode), `prompt` (the schema in the prompt only), or `auto`: try them in "
        "that order, json_object with the schema first, and remember per server and model what worked.",
    )
    retry_wait_min_s: NonNegativeFloat = Field(default=1.0, description="The first backoff (doubled after).")
    retry_wait_max_s: NonNegativeFloat = Field(default=60.0, description="Caps every wait, Retry-After too.")
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="Model name -> its price.")
    prompts: dict[Literal["analyze", "apply", "run"], Path] = Field(
        default_factory=dict,
        description="The tuning's own prompt templates (relative to the tuning file in a tuning file).",
    )
    concurrency: int | None = Field(
        default=None, ge=1, description="Calls to this base_url and model at once across the fleet."
    )
    tokens_per_minute: int | None = Field(
        default=None, ge=1, description="Tokens of this base_url and model per minute across the fleet."
    )

    @model_validator(mode="after")
    def _absolute_prompts(self) -> LlmAdapter:
        for step, path in self.prompts.items():
            if not path.is_absolute():
                raise ValueError(f"prompts.{step}: {path} must be an absolute path")
        return self


Adapter = Annotated[DemoAdapter | CommandAdapter | LlmAdapter, Field(discriminator="kind")]


class Budget(RedisValue):
    """What a case and the whole tuning may spend (None: no limit). A case at or past its limit ends
    `difficult: budget` before its next step starts; a tuning at or past its limit is held: no run
    starts until the budget is raised or `tunefleet resume TUNING` (docs/operations.md, "Budgets"),
    which keeps the budget it waived in `tf:budget-waived`."""

    model_config = ConfigDict(extra="forbid")

    case_max_usd: float | None = Field(default=None, gt=0, description="US dollars one case may spend.")
    case_max_tokens: int | None = Field(default=None, ge=1, description="Tokens one case may spend.")
    tuning_max_usd: float | None = Field(default=None, gt=0, description="US dollars the tuning may spend.")
    tuning_max_tokens: int | None = Field(default=None, ge=1, description="Tokens the tuning may spend.")

    @property
    def bounds_case(self) -> bool:
        """Whether a case's spend is bounded (then each step start counts it)."""
        return self.case_max_tokens is not None or self.case_max_usd is not None

    @property
    def bounds_tuning(self) -> bool:
        """Whether the tuning's spend is bounded (then each step start reads its counters)."""
        return self.tuning_max_tokens is not None or self.tuning_max_usd is not None

    def case_over(self, tokens: int, cost_usd: float) -> str | None:
        """The `budget: ...` reason when a case that spent this is at or past its limit."""
        return _over(tokens, cost_usd, self.case_max_tokens, self.case_max_usd)

    def tuning_over(self, tokens: int, cost_usd: float) -> str | None:
        """The `budget: ...` reason when a tuning that spent this is at or past its limit."""
        return _over(tokens, cost_usd, self.tuning_max_tokens, self.tuning_max_usd)


def _over(tokens: int, cost_usd: float, max_tokens: int | None, max_usd: float | None) -> str | None:
    if max_tokens is not None and tokens >= max_tokens:
        limit = f"{max_tokens} tokens"
    elif max_usd is not None and cost_usd >= max_usd:
        limit = f"${max_usd:g}"
    else:
        return None
    return f"budget: spent {tokens} tokens, ${cost_usd:.4f} of {limit}"


class TuningConfig(BaseModel):
    """`tuning.yaml`: one system, one data set, one config."""

    model_config = ConfigDict(extra="forbid")

    name: Slug
    system: Path = Field(description="A folder (or git repository) with the initial instructions.")
    cases: Path = Field(description="A folder of case files (*.yaml, *.yml, *.json).")
    tries: int = Field(default=3, ge=1, le=100)
    mem_tries: int = Field(default=2, ge=1, le=100)
    max_voids: int = Field(default=3, ge=1, description="Void runs in a row before the case ends failed.")
    max_sandbox_trips: NonNegativeInt = Field(
        default=5,
        description="Sandbox-down reports of one case's runner, with no sandbox to probe, after which "
        "the case ends failed.",
    )
    memory_max_entries: int = Field(
        default=1000,
        ge=1,
        description="The most files, folders and links a passing run's memory may hold: a larger one ends "
        "the case difficult (`memory too large: ...`), neither copied into a run nor kept.",
    )
    memory_max_mb: PositiveFloat = Field(
        default=64.0,
        description="The most megabytes (10^6 bytes) a passing run's memory may hold, as "
        "`memory_max_entries`.",
    )
    confirm_runs: NonNegativeInt = Field(
        default=0,
        le=50,
        description="After a passing try, this many more runs on the same version (graded, no apply "
        "between them) before the pass ends its phase; 0 (the seed's loop): one pass ends it. They do not "
        "count against `tries`.",
    )
    confirm_min_passes: int | None = Field(
        default=None,
        ge=1,
        description="Of the `confirm_runs`, how many must pass for the pass to stand (unset: all of them). "
        "A pass that does not stand is a failed try: its failing run's feedback is applied.",
    )
    max_failed_reruns: NonNegativeInt = Field(
        default=1,
        description="How often daemon starts run a failed case again (counted by its archived failures); "
        "`tunefleet submit` always does.",
    )
    runner: Adapter = Field(default_factory=DemoAdapter)
    analyzer: Adapter = Field(default_factory=DemoAdapter)
    applier: Adapter = Field(default_factory=DemoAdapter)
    remote: str | None = Field(default=None, description="A git remote to mirror published versions to.")
    remote_branch: str = "tunefleet"
    budget: Budget = Field(default_factory=Budget, description="Spending limits (none by default).")
    holdout: HoldoutConfig | None = Field(
        default=None, description="Cases never tuned on, evaluated before and after (docs/evaluation.md)."
    )
    gate: GateConfig | None = Field(
        default=None,
        description='An acceptance gate on every apply (docs/architecture.md, "The acceptance gate"); '
        "none: every apply is published as it is made.",
    )
    guards: GuardsConfig | None = Field(
        default=None,
        description="Checks on every apply's candidate that cost no run (leak, size, collapse; "
        "docs/guards.md), made before its gate; none: no guard.",
    )

    @property
    def confirm_needed(self) -> int:
        """How many of the `confirm_runs` must pass for a pass to stand."""
        return self.confirm_runs if self.confirm_min_passes is None else self.confirm_min_passes

    @model_validator(mode="after")
    def _known_placeholders(self) -> TuningConfig:
        problems = [p for role in PLACEHOLDERS for p in argv_problems(role, getattr(self, role))]
        if self.confirm_min_passes is not None and self.confirm_min_passes > self.confirm_runs:
            problems.append(
                (
                    "confirm_min_passes",
                    f"{self.confirm_min_passes} is more than confirm_runs ({self.confirm_runs}); "
                    "expected at most confirm_runs",
                )
            )
        if self.gate is not None and self.gate.needs_folder() and self.gate.folder is None:
            problems.append(
                ("gate.folder", f"gate cases {self.gate.cases!r} need a folder of regression cases")
            )
        if problems:
            raise FieldErrors(problems)
        return self


def argv_problems(role: str, adapter: object) -> list[tuple[str, str]]:
    """What is wrong with a command adapter's argv template for `role` (its field, the problem): a
    placeholder the role is not given, or an element that is not a template; none for other adapters."""
    if not isinstance(adapter, CommandAdapter):
        return []
    names = PLACEHOLDERS[role]
    problems = []
    for index, element in enumerate(adapter.argv):
        field = f"{role}.argv[{index}]"
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(element) if f is not None]
        except ValueError as exc:
            problems.append((field, f"{exc} (write a literal brace as {{{{ or }}}})"))
            continue
        for unknown in sorted(set(fields) - names):
            why = WITHHELD.get(unknown)
            if why:
                what = f"{{{unknown}}} is not given to the {role}: {why}"
            else:
                what = f"unknown placeholder {{{unknown}}}" + did_you_mean(unknown, sorted(names))
            problems.append((field, what))
    return problems


def missing_placeholders(role: str, adapter: object) -> list[str]:
    """The placeholders a command adapter's argv must name for `role` (REQUIRED) and does not."""
    if not isinstance(adapter, CommandAdapter):
        return []
    named = {f for element in adapter.argv for f in _fields(element)}
    return [name for name in REQUIRED.get(role, ()) if name not in named]


def _fields(element: str) -> list[str]:
    try:
        return [f for _, f, _, _ in string.Formatter().parse(element) if f]
    except ValueError:
        return []


REQUIRED: dict[str, tuple[str, ...]] = {
    "runner": ("output",),
    "analyzer": ("feedback",),
    "applier": ("worktree", "output"),
}
"""The placeholders each role's argv must name: where it writes what the fleet reads (a runner without
{output} makes every run void; an analyzer without {feedback} or an applier without {output} fails
every case; an applier without {worktree} cannot edit). A tuning file whose runner lacks its {output} is
refused at load; `tunefleet check` warns of the others (a test may want an agent that writes nothing)."""
