"""Fleet-wide settings: environment (`TUNEFLEET_*`), an optional YAML file, then defaults.

Built once at an entry point (CLI command, worker, daemon) and passed down explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, SecretStr, StringConstraints
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

CONFIG_ENV = "TUNEFLEET_CONFIG"


class FleetSettings(BaseSettings):
    """Everything a fleet process needs to find Redis and the store, and how it paces itself."""

    model_config = SettingsConfigDict(env_prefix="TUNEFLEET_", extra="forbid")

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="redis:// or rediss:// (TLS).")
    redis_password: SecretStr | None = None
    redis_tls_ca_file: Path | None = Field(
        default=None, description="PEM file of the CA that signed Redis's certificate (rediss:// only)."
    )
    redis_tls_cert_file: Path | None = Field(
        default=None, description="PEM client certificate, for a Redis that checks clients (tls-auth-clients)"
    )
    redis_tls_key_file: Path | None = Field(default=None, description="The client certificate's key (PEM).")
    redis_sentinels: list[str] = Field(default_factory=list, description="host:port of Sentinels.")
    redis_sentinel_master: str = "mymaster"
    redis_failover_wait_s: NonNegativeFloat = Field(
        default=30.0,
        description="With Sentinels: how long a command waits for a new primary after the old one died.",
    )
    redis_connect_timeout_s: PositiveFloat = 5.0
    redis_connect_attempts: int = Field(default=10, ge=1)

    store: Path = Field(default=Path(".store"), description="The shared store folder.")
    queue: str = Field(default="tf:queue", description="The arq queue's sorted set.")
    kinds: list[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]
    ] = Field(
        default_factory=list,
        description="Job kinds beyond the built-in ones: the service packages of their slices (each with "
        'a `slice` module holding SLICE, docs/architecture.md, "Adding a kind"), the same on every '
        "process of the fleet.",
    )

    concurrency: int = Field(default=10, ge=1, description="Cases one worker process runs at once.")
    poll_delay_s: PositiveFloat = 0.2
    outage_backoff_max_s: PositiveFloat = Field(
        default=2.0,
        description="While Redis is unreachable, a worker's polls and watches wait longer after each "
        "failure, up to this.",
    )
    queue_read_limit: int | None = Field(
        default=None,
        ge=1,
        description="Queue entries one poll reads, of the jobs to resume and of the fresh ones "
        "(unset: max(5 x concurrency, 100), as arq's worker reads).",
    )
    lease_s: PositiveFloat = Field(default=10.0, description="A running case's lease; renewed every third.")
    stop_grace_s: PositiveFloat = Field(default=10.0, description="TERM-to-KILL wait for agent processes.")
    cgroup_dirs: list[Path] = Field(
        default_factory=list,
        description="Cgroup folders (cgroup v2, or one per v1 hierarchy such as pids and memory) in which "
        "a worker makes one group per agent step, to enforce its processes and memory limits.",
    )
    agent_uid: NonNegativeInt = Field(
        default=65534,
        description="The user (and group) every agent runs as when the worker runs as root (65534: "
        "nobody; 0 runs them as root, unsafe); a worker that is not root runs them as itself.",
    )
    max_lease_losses: int = Field(default=5, ge=1, description="Lost leases before a case ends failed.")

    lock_lease_s: PositiveFloat = Field(
        default=3.0,
        description="The improvements lock's lease, renewed every third: a dead holder's lock returns "
        "within it.",
    )
    provider_retry_s: PositiveFloat = Field(
        default=60.0, description="How long a case waits in the queue after its LLM provider was down."
    )
    provider_handbacks_max: int = Field(
        default=120,
        ge=1,
        description="How often a job is handed back because its LLM provider stayed down before it ends "
        "failed with the provider's last error (at provider_retry_s 60: two hours of outage).",
    )
    wait_for_apply: bool = Field(default=True, description="Run starts wait for a pending apply.")
    wait_for_apply_max_s: NonNegativeFloat = 300.0

    gc_interval_s: float | None = Field(
        default=None,
        gt=0,
        description="The daemon runs `tunefleet gc --apply` this often (None: never, gc is run by hand).",
    )
    retention_snapshot_age_s: NonNegativeFloat = Field(
        default=7 * 86400.0,
        description="`tunefleet gc` removes a snapshot of a version other than the current one only once "
        "it was extracted this long ago (service.client.gc).",
    )
    retention_candidate_age_s: NonNegativeFloat = Field(
        default=30 * 86400.0,
        description="`tunefleet gc` removes the candidate ref of a try whose apply was decided this long ago "
        "(published or rejected: the rejected ref and the history keep what `versions` reads).",
    )
    retention_eval_item_age_s: NonNegativeFloat = Field(
        default=14 * 86400.0,
        description="`tunefleet gc` empties the items' folders of an evaluation that ended this long ago, "
        "keeping each item's outcome (item.json) and the evaluation's RESULTS.json.",
    )
    retention_void_age_s: NonNegativeFloat = Field(
        default=7 * 86400.0,
        description="`tunefleet gc` removes the agents' folders of a void try set aside this long ago in a "
        "case that ended, keeping the try's records (run.json, feedback.json, analysis.md).",
    )
    breaker_probe_base_s: PositiveFloat = 2.0
    breaker_probe_max_s: PositiveFloat = 60.0

    reconcile_interval_s: PositiveFloat = 30.0
    daemon_lease_s: PositiveFloat = Field(
        default=10.0,
        description="The daemon's lease on the fleet (one daemon per Redis), renewed every third; a "
        "killed daemon blocks the next start for at most this long.",
    )
    git_timeout_s: PositiveFloat = Field(
        default=60.0, description="How long one git command on a system repository may run."
    )
    mirror_timeout_s: PositiveFloat = Field(
        default=30.0, description="How long one push of a version to a tuning's remote may run."
    )
    mirror_retry_s: PositiveFloat = Field(
        default=30.0, description="How often the daemon pushes each tuning's current version to its remote."
    )
    goal_min_iterations: int = Field(default=1, ge=1, description="A goal's default `min_iterations`.")
    goal_max_iterations: int = Field(default=5, ge=1, description="A goal's default `max_iterations`.")
    goal_timeout_s: PositiveFloat = Field(default=8 * 3600.0, description="A goal's default run timeout.")
    goal_iteration_timeout_s: PositiveFloat = Field(
        default=2 * 3600.0, description="A goal's default iteration timeout."
    )
    goal_reviewer_timeout_s: PositiveFloat = Field(
        default=900.0, description="A goal's default reviewer timeout."
    )
    goal_attempts_per_task: int = Field(default=2, ge=1, description="A goal's default attempts per task.")
    goal_max_voids: int = Field(default=3, ge=1, description="Void goal steps in a row before it fails.")
    goal_lock_wait_s: PositiveFloat = Field(
        default=10.0,
        description="How long a worker waits for a goal's lock held by another process before it hands "
        "the goal back for later (the holder frozen, or its disk hung).",
    )
    events_max: int = Field(default=100_000, ge=100, description="Events kept in the Redis stream.")

    api_host: str = "127.0.0.1"
    api_port: NonNegativeInt = Field(default=8321, le=65535)
    api_token: SecretStr | None = Field(
        default=None,
        description="Bearer token for the API's writes (submit, pause, resume, cancel); it reads too.",
    )
    api_read_token: SecretStr | None = Field(
        default=None, description="Bearer token for the API's reads, /metrics and the dashboard only."
    )
    api_public_read: bool = Field(
        default=False, description="Let anyone read the API, /metrics and the dashboard, without a token."
    )
    api_cookie_secure: Literal["auto", "always"] = Field(
        default="auto",
        description="When the dashboard's read cookie is `Secure`: `auto` when the request came over TLS "
        "(an https URL, or `X-Forwarded-Proto: https` from a proxy), `always` for a proxy that says nothing.",
    )
    case_max_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        description="The largest case: a case file `submit` takes, a case sent over HTTP.",
    )

    health_host: str = Field(default="127.0.0.1", description="Where a worker serves /healthz and /readyz.")
    health_port: NonNegativeInt = Field(
        default=0, le=65535, description="A worker's health port; 0 serves no health endpoints."
    )

    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_ENV)
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=Path(config_file)))
        return tuple(sources)
