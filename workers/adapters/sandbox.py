"""Wrap an agent's argv in its role's sandbox (bubblewrap, podman, docker), and probe whether it works.

Paths keep their host names inside the sandbox, so placeholders rendered to host paths stay valid.
A sandbox shows the agent a minimal root (the system's `/usr`, `/bin`, `/lib*` and the `/etc`
files that programs need to run and to reach the network), the paths its role may read
(read-only), the folders of its own step (read-write), a private `/tmp`, `/dev` and `/proc`,
and nothing else: not the store, not another case, not the system repository. It runs in new
namespaces (PID, IPC, UTS, user and cgroup where the kernel allows; network unless
`network: true`), in a new session, with no capabilities, and dies with the worker.
docs/adapters.md ("Sandboxes") has the table.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from service.core.errors import ConfigError
from service.core.models.tuning import AgentLimits, DemoAdapter, SandboxConfig
from workers.adapters.process import Containment, ProcessSpec, run_process

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


@dataclass(frozen=True)
class SandboxMounts:
    """What a wrapped command may see: folders it writes, files and folders it only reads."""

    writable: Sequence[Path] = ()
    readonly: Sequence[Path] = ()
    cwd: Path | None = None
    home: Path | None = None
    env_names: Sequence[str] = field(default_factory=tuple)


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
    writable = _unique(mounts.writable)
    readonly = [p for p in _unique([*config.readonly_paths, *mounts.readonly]) if p not in writable]
    # Parents first, so a child bind is not hidden under its parent's.
    for path in sorted(readonly + writable, key=lambda p: p.count("/")):
        wrapped += ["--bind" if path in writable else "--ro-bind", path, path]
    if mounts.home is not None:
        wrapped += ["--setenv", "HOME", str(mounts.home)]
    wrapped += ["--setenv", "TMPDIR", "/tmp"]
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


def _container(argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts, name: str) -> list[str]:
    check_sandbox(config)
    assert config.image is not None
    wrapped = [config.kind, "run", "--rm", "-i", "--init", "--name", name]
    wrapped += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only"]
    wrapped += ["--tmpfs", f"/tmp:size={config.limits.tmp_mb}m"]
    if not config.network:
        wrapped += ["--network", "none"]
    if config.kind == "docker" and hasattr(os, "getuid"):
        # Files the agent writes into the store must stay the worker's (rootless podman maps this itself).
        wrapped += ["--user", f"{os.getuid()}:{os.getgid()}"]
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
    for env_name in mounts.env_names:
        wrapped += ["-e", env_name]  # the value comes from our environment, never from the command line
    return [*wrapped, *config.extra_args, config.image, *argv]


def wrap_argv(
    argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts, name: str = "tf"
) -> list[str]:
    """The argv that runs `argv` inside the configured sandbox (unchanged for kind none); `name` names
    a container, so that it can be removed when the step ends."""
    if config.kind == "none":
        return list(argv)
    if config.kind == "bubblewrap":
        return _bubblewrap(argv, config, mounts)
    return _container(argv, config, mounts, name)


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
    """Runs the probe command (default: the sandbox around `true`); exit 0 means the sandbox works.

    Without a sandbox (kind none) there is nothing to probe: it always works.
    """

    def __init__(self, config: SandboxConfig, grace_s: float = 5.0) -> None:
        check_sandbox(config)
        self._config = config
        self._grace_s = grace_s

    def probe_argv(self, name: str = "tf-probe") -> list[str]:
        if self._config.probe_argv:
            return list(self._config.probe_argv)
        return wrap_argv(["true"], self._config, SandboxMounts(), name)

    async def probe(self) -> str | None:
        if self._config.kind == "none":
            return None
        timeout_s = self._config.probe_timeout_s
        with tempfile.TemporaryDirectory(prefix="tf-probe-") as scratch:
            name = f"tf-probe-{Path(scratch).name}"
            spec = ProcessSpec(
                argv=self.probe_argv(name),
                log_file=Path(scratch) / "probe.log",
                timeout_s=timeout_s,
                grace_s=self._grace_s,
                containment=containment(self._config, (), name),
            )
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
