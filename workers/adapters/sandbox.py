"""Wrap the runner's argv in a sandbox (bubblewrap, podman, docker), and probe whether it works.

Paths keep their host names inside the sandbox, so placeholders rendered to host paths stay valid:
the attempt's writable folders are bound read-write, the inputs read-only, everything else is
read-only (bubblewrap) or absent (containers).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import ConfigError
from service.models.tuning import DemoAdapter, SandboxConfig
from workers.adapters.process import ProcessSpec, run_process

CONTAINER_SETUP_EXIT = 125
"""The exit code with which `docker run` / `podman run` say the container could not be started."""


@dataclass(frozen=True)
class SandboxMounts:
    """What a wrapped command may see: folders it writes, files and folders it only reads."""

    writable: Sequence[Path] = ()
    readonly: Sequence[Path] = ()
    cwd: Path | None = None
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


def _bubblewrap(argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts) -> list[str]:
    wrapped = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    wrapped += ["--unshare-pid", "--die-with-parent", *config.extra_args]
    writable = _unique(mounts.writable)
    for path in _unique(mounts.readonly):
        if path not in writable:
            wrapped += ["--ro-bind", path, path]
    for path in writable:
        wrapped += ["--bind", path, path]
    if mounts.cwd is not None:
        wrapped += ["--chdir", str(mounts.cwd)]
    return [*wrapped, "--", *argv]


def _container(argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts) -> list[str]:
    check_sandbox(config)
    assert config.image is not None
    wrapped = [config.kind, "run", "--rm", "-i"]
    if config.kind == "docker" and hasattr(os, "getuid"):
        # Files the agent writes into the store must stay the worker's (rootless podman maps this itself).
        wrapped += ["--user", f"{os.getuid()}:{os.getgid()}"]
    writable = _unique(mounts.writable)
    for path in _unique(mounts.readonly):
        if path not in writable:
            wrapped += ["-v", f"{path}:{path}:ro"]
    for path in writable:
        wrapped += ["-v", f"{path}:{path}"]
    if mounts.cwd is not None:
        wrapped += ["-w", str(mounts.cwd)]
    for name in mounts.env_names:
        wrapped += ["-e", name]  # the value comes from our environment, never from the command line
    return [*wrapped, *config.extra_args, config.image, *argv]


def wrap_argv(argv: Sequence[str], config: SandboxConfig, mounts: SandboxMounts) -> list[str]:
    """The argv that runs `argv` inside the configured sandbox (unchanged for kind none)."""
    if config.kind == "none":
        return list(argv)
    if config.kind == "bubblewrap":
        return _bubblewrap(argv, config, mounts)
    return _container(argv, config, mounts)


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

    def probe_argv(self) -> list[str]:
        if self._config.probe_argv:
            return list(self._config.probe_argv)
        return wrap_argv(["true"], self._config, SandboxMounts())

    async def probe(self) -> str | None:
        if self._config.kind == "none":
            return None
        timeout_s = self._config.probe_timeout_s
        with tempfile.TemporaryDirectory(prefix="tf-probe-") as scratch:
            spec = ProcessSpec(
                argv=self.probe_argv(),
                log_file=Path(scratch) / "probe.log",
                timeout_s=timeout_s,
                grace_s=self._grace_s,
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
