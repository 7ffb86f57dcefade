"""Wrap an agent's argv in its role's sandbox (bubblewrap, podman, docker), and probe whether it works.

Paths keep their host names inside the sandbox, so placeholders rendered to host paths stay valid.
A sandbox shows the agent a minimal root (the system's `/usr`, `/bin`, `/lib*` and the `/etc`
files that programs need to run and to reach the network), the paths its role may read
(read-only), the folders of its own step (read-write), a private `/tmp`, `/dev` and `/proc`,
and nothing else: not the store, not another case, not the system repository. It runs in new
namespaces (PID, IPC, UTS, user and cgroup where the kernel allows; network unless
`network: true`), in a new session, with no capabilities, and dies with the worker. Each starts
the agent with a cleared environment and gives it only the agent's own (workers/adapters/isolation.py):
bubblewrap reads it from a file descriptor its keeper fills, containers take each name's value from
their caller (`-e NAME`), so that no value shows on a command line. Where the worker is root, the
agent runs as `agent_uid` (the keeper drops to it before bubblewrap starts; containers get `--user`).
docs/adapters.md ("Sandboxes", "What each agent receives") has the tables.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from service.core.errors import ConfigError
from service.core.models.tuning import AgentLimits, DemoAdapter, SandboxConfig
from workers.adapters.isolation import agent_environment
from workers.adapters.process import AgentHost, Containment, ProcessSpec, run_process

CONTAINER_SETUP_EXIT = 125
"""The exit code with which `docker run` / `podman run` say the container could not be started."""

ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Shown as the host has them: a symlink into /usr (merged /usr) or a read-only folder."""

ETC_FILES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl",
)
"""What programs need of /etc to run, resolve names and check TLS certificates."""

MIB = 1024 * 1024
ENV_ARGS = "{agent-env-fd}"
"""Where bubblewrap's argv names the descriptor with the agent's environment; its keeper fills it in."""
CONTAINER_SKIPS = frozenset({"PATH", "HOME"})
"""Variables a container keeps its own (the image's PATH) or is given apart (HOME)."""


@dataclass(frozen=True)
class SandboxMounts:
    """What a wrapped command may see: folders it writes, files and folders it only reads."""

    writable: Sequence[Path] = ()
    readonly: Sequence[Path] = ()
    cwd: Path | None = None
    home: Path | None = None
    env_names: Sequence[str] = field(default_factory=tuple)
    """The names of the agent's environment a container is given (values from its caller's)."""


def _unique(paths: Iterable[Path]) -> list[str]:
    seen: dict[str, None] = {}
    for path in paths:
        seen.setdefault(str(Path(path).absolute()), None)
    return list(seen)


def check_sandbox(config: SandboxConfig) -> None:
    """Raise ConfigError when the sandbox cannot be built from this config."""
    if config.kind in ("podman", "docker") and not config.image:
        raise ConfigError(f"sandbox: field 'image' is required for kind {config.kind!r}")


def _minimal_root() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ROOT_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def _bubblewrap(argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts) -> list[str]:
    wrapped = ["bwrap", *_minimal_root(), "--dev", "/dev", "--proc", "/proc"]
    wrapped += ["--size", str(config.limits.tmp_mb * MIB), "--tmpfs", "/tmp"]
    wrapped += ["--unshare-all", *(["--share-net"] if config.network else [])]
    wrapped += ["--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    wrapped += ["--clearenv", "--args", ENV_ARGS, "--setenv", "TMPDIR", "/tmp"]
    writable = _unique(mounts.writable)
    readonly = [p for p in _unique([*config.readonly_paths, *mounts.readonly]) if p not in writable]
    # Parents first, so a child bind is not hidden under its parent's.
    for path in sorted(readonly + writable, key=lambda p: p.count("/")):
        wrapped += ["--bind" if path in writable else "--ro-bind", path, path]
    if mounts.cwd is not None:
        wrapped += ["--chdir", str(mounts.cwd)]
    return [*wrapped, *config.extra_args, "--", *argv]


def _container_limits(limits: AgentLimits) -> list[str]:
    options: list[str] = []
    if limits.memory_mb is not None:
        options += ["--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m"]
    if limits.processes is not None:
        options += ["--pids-limit", str(limits.processes)]
    if limits.file_size_mb is not None:
        options += ["--ulimit", f"fsize={limits.file_size_mb * MIB}"]
    if limits.open_files is not None:
        options += ["--ulimit", f"nofile={limits.open_files}"]
    return options


def _container_user(config: SandboxConfig, uid: int | None) -> list[str]:
    """Who the agent is in its container: `uid` where the worker is root; else, for docker, the worker's
    own user, so that what it writes into the store stays the worker's (rootless podman maps this itself)."""
    if uid is not None:
        return ["--user", f"{uid}:{uid}"]
    if config.kind == "docker":
        return ["--user", f"{os.getuid()}:{os.getgid()}"]
    return []


def _container(
    argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts, name: str, uid: int | None
) -> list[str]:
    check_sandbox(config)
    assert config.image is not None
    wrapped = [config.kind, "run", "--rm", "-i", "--init", "--name", name]
    wrapped += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only"]
    wrapped += ["--tmpfs", f"/tmp:size={config.limits.tmp_mb}m"]
    if config.kind == "podman":  # podman would pass the caller's proxy variables (and their secrets) on
        wrapped += ["--http-proxy=false"]
    if not config.network:
        wrapped += ["--network", "none"]
    wrapped += _container_user(config, uid)
    wrapped += _container_limits(config.limits)
    writable = _unique(mounts.writable)
    for path in _unique([*config.readonly_paths, *mounts.readonly]):
        if path not in writable:
            wrapped += ["-v", f"{path}:{path}:ro"]
    for path in writable:
        wrapped += ["-v", f"{path}:{path}"]
    if mounts.home is not None:
        wrapped += ["-e", f"HOME={mounts.home}"]
    if mounts.cwd is not None:
        wrapped += ["-w", str(mounts.cwd)]
    wrapped += ["-e", "TMPDIR=/tmp"]
    for env_name in mounts.env_names:
        if env_name not in CONTAINER_SKIPS:  # the value comes from the caller's environment, never argv
            wrapped += ["-e", env_name]
    return [*wrapped, *config.extra_args, config.image, *argv]


def wrap_argv(
    argv: Sequence[str],
    config: SandboxConfig,
    mounts: SandboxMounts,
    name: str = "tf",
    uid: int | None = None,
) -> list[str]:
    """The argv that runs `argv` inside the configured sandbox (unchanged for kind none); `name` names
    a container, so that it can be removed when the step ends; `uid` is the agent's user, if not the
    worker's."""
    if config.kind == "none":
        return list(argv)
    if config.kind == "bubblewrap":
        return _bubblewrap(argv, config, mounts)
    return _container(argv, config, mounts, name, uid)


def _namespaces(config: SandboxConfig, host: AgentHost, mounts: SandboxMounts) -> dict[str, object] | None:
    """What the keeper isolates by itself for an agent with no sandbox, where the worker may: the store
    hidden but for the step's folders (those it writes writable), /proc, and the network unless open."""
    if config.kind != "none" or not host.powers.namespaces:
        return None
    hidden = [str(p) for p in host.hidden]
    writable = _unique(mounts.writable)
    shown = writable + _unique([*config.readonly_paths, *mounts.readonly])
    inside = [p for p in dict.fromkeys(shown) if any(p == h or p.startswith(h + "/") for h in hidden)]
    return {"network": config.network, "hide": hidden, "show": [[p, p in writable] for p in inside]}


def agent_spec(
    argv: Sequence[str],
    config: SandboxConfig,
    host: AgentHost,
    mounts: SandboxMounts,
    allowed_env: dict[str, str | None],
    *,
    name: str,
    log_file: Path,
    timeout_s: float,
) -> ProcessSpec:
    """The process of one agent step: `argv` in its sandbox, under its keeper, with the agent's own
    environment, user and namespaces (workers/adapters/isolation.py)."""
    env = agent_environment(allowed_env, mounts.home, os.environ)
    mounts = replace(mounts, env_names=sorted(env))
    uid = host.agent_uid
    return ProcessSpec(
        argv=wrap_argv(argv, config, mounts, name, uid),
        log_file=log_file,
        timeout_s=timeout_s,
        grace_s=host.grace_s,
        env=env,
        cwd=mounts.cwd,
        containment=replace(
            containment(config, host.cgroup_dirs, name),
            uid=uid if config.kind in ("none", "bubblewrap") else None,
            lent=tuple(mounts.writable),
            lent_to=uid,
            namespaces=_namespaces(config, host, mounts),
            env_args=ENV_ARGS if config.kind == "bubblewrap" else None,
        ),
    )


def containment(config: SandboxConfig, cgroup_dirs: Sequence[Path], name: str) -> Containment:
    """How the step's keeper holds the process: its limits, its cgroups, and a container to remove."""
    limits = config.limits
    rlimits: dict[str, int] = {}
    cgroup_limits: dict[str, int] = {}
    is_container = config.kind in ("podman", "docker")
    if not is_container:  # a container's limits are its own options: they do not pass through the CLI
        if limits.file_size_mb is not None:
            rlimits["fsize"] = limits.file_size_mb * MIB
        if limits.open_files is not None:
            rlimits["nofile"] = limits.open_files
        if limits.memory_mb is not None:
            if cgroup_dirs:
                cgroup_limits["memory_bytes"] = limits.memory_mb * MIB
            else:
                rlimits["as"] = limits.memory_mb * MIB
        if limits.processes is not None:
            if cgroup_dirs:
                cgroup_limits["processes"] = limits.processes
            else:
                rlimits["nproc"] = limits.processes
    return Containment(
        name=name,
        rlimits=rlimits,
        cgroup_dirs=tuple(cgroup_dirs) if not is_container else (),
        cgroup_limits=cgroup_limits,
        cleanup=(config.kind, "rm", "--force", name) if is_container else (),
    )


def is_sandbox_setup_failure(config: SandboxConfig, exit_code: int) -> bool:
    """Whether an exit code is the container tool's own failure rather than the agent's."""
    return config.kind in ("podman", "docker") and exit_code == CONTAINER_SETUP_EXIT


class SandboxProber:
    """Runs the probe command (default: the sandbox around `true`, as the agents' own user and with an
    agent's environment); exit 0 means the sandbox works.

    Without a sandbox (kind none) there is nothing to probe: it always works.
    """

    def __init__(self, config: SandboxConfig, grace_s: float = 5.0, host: AgentHost | None = None) -> None:
        check_sandbox(config)
        self._config = config
        self._host = host or AgentHost(grace_s=grace_s)

    def probe_argv(self, name: str = "tf-probe") -> list[str]:
        """The probe's command as one can run it by hand: without the descriptor that its keeper fills
        with an agent's environment (a probe has none to give)."""
        if self._config.probe_argv:
            return list(self._config.probe_argv)
        argv = wrap_argv(["true"], self._config, SandboxMounts(), name, self._host.agent_uid)
        if ENV_ARGS in argv:
            at = argv.index(ENV_ARGS)
            del argv[at - 1 : at + 1]
        return argv

    async def probe(self) -> str | None:
        if self._config.kind == "none":
            return None
        timeout_s = self._config.probe_timeout_s
        with tempfile.TemporaryDirectory(prefix="tf-probe-") as scratch:
            name = f"tf-probe-{Path(scratch).name}"
            spec = agent_spec(
                ["true"],
                self._config,
                self._host,
                SandboxMounts(),
                {},
                name=name,
                log_file=Path(scratch) / "probe.log",
                timeout_s=timeout_s,
            )
            if self._config.probe_argv:
                spec = replace(spec, argv=list(self._config.probe_argv))
            result = await run_process(spec)
        if result.start_error:
            return f"sandbox probe could not start: {result.start_error}"
        if result.timed_out:
            return f"sandbox probe timed out after {timeout_s:g} s"
        if result.exit_code != 0:
            detail = f": {result.last_line}" if result.last_line else ""
            return f"sandbox probe exited {result.exit_code}{detail}"
        return None


class DemoProber:
    """The demo sandbox is down while the tuning's outage file exists."""

    def __init__(self, config: DemoAdapter) -> None:
        self._outage_file = config.outage_file

    async def probe(self) -> str | None:
        if self._outage_file is not None and self._outage_file.exists():
            return f"demo sandbox is down (outage file {self._outage_file} exists)"
        return None
