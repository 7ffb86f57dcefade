"""deploy/systemd checked: `systemd-analyze verify` passes on the units, and they agree with the code
(the CLI, the settings, the worker's stop grace) and keep bubblewrap working under their hardening.

Each check returns the problems it finds; the real files must have none, and broken copies must have
some.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from service.core.models.tuning import SandboxConfig
from tests.support.fleet_cli import argv_problems, is_setting
from tests.support.grace import default_stop_grace_s, parse_duration, release_wait_s
from tests.support.tools import needs_tool
from workers.adapters.sandbox import SandboxProber

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
DAEMON = "tunefleet-daemon.service"
WORKER = "tunefleet-worker@.service"
ENV_EXAMPLE = UNITS / "tunefleet.env.example"
SHARED_ENV = "/etc/tunefleet/tunefleet.env"
INSTALLED_CLI = "/opt/tunefleet/venv/bin/tunefleet"
"""Where the units expect the CLI (docs/operations.md installs it there)."""
STATE_ROOT = PurePosixPath("/var/lib")

Unit = dict[str, dict[str, list[str]]]
"""A unit file: section -> key -> every value it is given, in order (systemd keys can repeat)."""


def parse_unit(text: str) -> Unit:
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"a setting before any section: {line!r}"
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def last(unit: Unit, section: str, key: str) -> str | None:
    values = unit.get(section, {}).get(key)
    return values[-1] if values else None


def load(name: str) -> Unit:
    return parse_unit((UNITS / name).read_text())


def env_example() -> dict[str, str]:
    pairs = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            pairs[name] = value
    return pairs


# ---------------------------------------------------------------------------------------------
# The checks


def common_problems(unit: Unit) -> list[str]:
    """Restart on failure, the shared environment file, and the hardening both units must have."""
    problems = []
    wanted = {
        "Restart": "on-failure",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "KillMode": "mixed",
    }
    for key, value in wanted.items():
        if last(unit, "Service", key) != value:
            problems.append(f"{key}={last(unit, 'Service', key)}, not {value}")
    if SHARED_ENV not in unit.get("Service", {}).get("EnvironmentFile", []):
        problems.append(f"the shared environment file {SHARED_ENV} is not read")
    if last(unit, "Service", "User") in (None, "root", "0"):
        problems.append("the service runs as root")
    store = PurePosixPath(env_example()["TUNEFLEET_STORE"])
    writable = [STATE_ROOT / d for d in (last(unit, "Service", "StateDirectory") or "").split()]
    writable += [
        PurePosixPath(p.lstrip("-")) for p in (last(unit, "Service", "ReadWritePaths") or "").split()
    ]
    if not any(store == w or w in store.parents for w in writable):
        problems.append(f"the store {store} is read-only under ProtectSystem=strict (writable: {writable})")
    return problems


def command_problems(unit: Unit, subcommand: str) -> list[str]:
    """ExecStart runs the installed CLI's `subcommand`, with arguments the CLI accepts."""
    argv = shlex.split(last(unit, "Service", "ExecStart") or "")
    if argv[:2] != [INSTALLED_CLI, subcommand]:
        return [f"ExecStart is {argv}, not {INSTALLED_CLI} {subcommand} ..."]
    env = env_example()
    args: list[str] = []
    for word in argv[2:]:  # systemd splits an unbraced $VAR into words
        args += env.get(word[1:], "").split() if word.startswith("$") else [word]
    return argv_problems([subcommand, *args])


def grace_problems(unit: Unit) -> list[str]:
    """TimeoutStopSec exceeds the worker's stop_grace_s (as the environment file sets it) plus the
    hand-back wait read from the worker's code."""
    configured = env_example().get("TUNEFLEET_STOP_GRACE_S")
    grace = float(configured) if configured else default_stop_grace_s()
    timeout_text = last(unit, "Service", "TimeoutStopSec")
    timeout = parse_duration(timeout_text) if timeout_text else 90.0  # systemd's DefaultTimeoutStopSec
    if timeout <= grace + release_wait_s():
        return [
            f"TimeoutStopSec {timeout:g} s is not more than {grace:g} s + the {release_wait_s():g} s wait"
        ]
    return []


BLOCKS_BWRAP = {
    "RestrictNamespaces",  # forbids the namespaces
    "PrivateUsers",  # a user namespace too narrow to nest the sandbox's
    "SystemCallFilter",  # @system-service lacks mount, pivot_root, unshare
    "ProtectKernelTunables",  # these four mount over parts of /proc, and the kernel then refuses
    "ProtectKernelLogs",  # the fresh /proc that bwrap mounts in the sandbox
    "ProtectProc",
    "ProcSubset",
    "ProtectHostname",  # makes /proc/sys/kernel/hostname read-only, by a mount
}
PROC_MOUNTS = {
    "ProtectKernelTunables": "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys",
    "ProtectKernelLogs": "mount --bind /dev/null /proc/kmsg",
    "ProtectHostname": "mount --bind /proc/sys/kernel/hostname /proc/sys/kernel/hostname"
    " && mount -o remount,bind,ro /proc/sys/kernel/hostname",
}
"""What systemd mounts over /proc for these options (in the service's own mount namespace)."""


def sandbox_problems(unit: Unit) -> list[str]:
    """Nothing in the worker's unit forbids the namespaces and system calls bubblewrap needs."""
    service = unit.get("Service", {})
    problems = [f"{key}= would stop bubblewrap" for key in sorted(BLOCKS_BWRAP & set(service))]
    families = (last(unit, "Service", "RestrictAddressFamilies") or "AF_NETLINK").split()
    if "AF_NETLINK" not in families:
        problems.append("RestrictAddressFamilies= leaves out AF_NETLINK: bwrap cannot set up loopback")
    return problems


def env_problems() -> list[str]:
    """Every TUNEFLEET_* variable of the environment file is a fleet setting."""
    return [
        f"{name} is not a fleet setting"
        for name in env_example()
        if name.startswith("TUNEFLEET_") and not is_setting(name)
    ]


# ---------------------------------------------------------------------------------------------
# Tests


def verify(folder: Path, units: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` on these units (name -> text), written to `folder` with ExecStart running
    this checkout's CLI (verify requires the program to exist); an instance stands for a template."""
    cli = str(Path(sys.prefix) / "bin" / "tunefleet")
    for name, text in units.items():
        (folder / name).write_text(text.replace(INSTALLED_CLI, cli))
    paths = [str(folder / name.replace("@.service", "@1.service")) for name in units]
    return subprocess.run(
        ["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=60, check=False
    )


def real_units(*names: str) -> dict[str, str]:
    return {name: (UNITS / name).read_text() for name in names}


@needs_tool("systemd-analyze")
def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts both units without a warning."""
    result = verify(tmp_path, real_units(DAEMON, WORKER))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


@needs_tool("systemd-analyze")
def test_systemd_analyze_verify_catches_a_bad_unit(tmp_path: Path) -> None:
    """A misspelt key or a bad value in a unit makes verify speak, so the test above can fail."""
    for bad in ("NoNewPrivilege=yes", "PrivateTmp=perhaps"):
        text = real_units(WORKER)[WORKER].replace("[Install]", f"{bad}\n[Install]")
        result = verify(tmp_path, {WORKER: text})
        assert WORKER in result.stdout + result.stderr


UNIT_CHECKS: dict[str, Callable[[], list[str]]] = {
    "daemon common": lambda: common_problems(load(DAEMON)),
    "worker common": lambda: common_problems(load(WORKER)),
    "daemon command": lambda: command_problems(load(DAEMON), "daemon"),
    "worker command": lambda: command_problems(load(WORKER), "worker"),
    "worker grace": lambda: grace_problems(load(WORKER)),
    "worker sandbox": lambda: sandbox_problems(load(WORKER)),
    "environment file": env_problems,
}


@pytest.mark.parametrize("check", list(UNIT_CHECKS))
def test_units_pass(check: str) -> None:
    """The units have no problem of this kind."""
    assert UNIT_CHECKS[check]() == []


def _edit(name: str, old: str, new: str) -> Unit:
    text = (UNITS / name).read_text()
    assert old in text, f"{name} no longer contains {old!r}: update this test"
    return parse_unit(text.replace(old, new))


BROKEN: dict[str, Callable[[], list[str]]] = {
    "no shared environment": lambda: common_problems(
        _edit(DAEMON, "EnvironmentFile=/etc/tunefleet/tunefleet.env", "EnvironmentFile=/etc/tunefleet.env")
    ),
    "no restart": lambda: common_problems(_edit(WORKER, "Restart=on-failure", "Restart=no")),
    "no NoNewPrivileges": lambda: common_problems(_edit(DAEMON, "NoNewPrivileges=yes", "")),
    "ProtectSystem off": lambda: common_problems(_edit(WORKER, "ProtectSystem=strict", "ProtectSystem=no")),
    "no PrivateTmp": lambda: common_problems(_edit(WORKER, "PrivateTmp=yes", "")),
    "agents killed at once": lambda: common_problems(
        _edit(WORKER, "KillMode=mixed", "KillMode=control-group")
    ),
    "runs as root": lambda: common_problems(_edit(DAEMON, "User=tunefleet", "User=root")),
    "store not writable": lambda: common_problems(_edit(WORKER, "StateDirectory=tunefleet", "")),
    "stop timeout too short": lambda: grace_problems(
        _edit(WORKER, "TimeoutStopSec=40s", "TimeoutStopSec=15s")
    ),
    "namespaces restricted": lambda: sandbox_problems(
        _edit(WORKER, "LockPersonality=yes", "RestrictNamespaces=yes")
    ),
    "private users": lambda: sandbox_problems(_edit(WORKER, "LockPersonality=yes", "PrivateUsers=yes")),
    "kernel tunables": lambda: sandbox_problems(
        _edit(WORKER, "LockPersonality=yes", "ProtectKernelTunables=yes")
    ),
    "no netlink": lambda: sandbox_problems(_edit(WORKER, " AF_NETLINK", "")),
    "unknown subcommand": lambda: command_problems(
        _edit(WORKER, "bin/tunefleet worker", "bin/tunefleet wroker"), "worker"
    ),
    "bad option": lambda: command_problems(
        _edit(WORKER, "tunefleet worker", "tunefleet worker --fast"), "worker"
    ),
    "daemon without tunings": lambda: command_problems(_edit(DAEMON, " $TUNINGS", ""), "daemon"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_unit_is_caught(case: str) -> None:
    """A unit broken in this way is reported by the check responsible for it."""
    assert BROKEN[case]() != []


def run_probe_as_the_worker_unit(unit: Unit) -> subprocess.CompletedProcess[str]:
    """The bubblewrap sandbox probe run as the worker unit would run it: in a mount namespace with the
    unit's /proc mounts, with no new privileges, an empty capability bounding set, as nobody."""
    assert last(unit, "Service", "NoNewPrivileges") == "yes"
    assert last(unit, "Service", "CapabilityBoundingSet") == ""
    limits = ["--reuid", "65534", "--regid", "65534", "--clear-groups"]
    limits += ["--no-new-privs", "--bounding-set", "-all", "--inh-caps", "-all"]
    mounts = [m for key, m in PROC_MOUNTS.items() if last(unit, "Service", key) == "yes"]
    probe = SandboxProber(SandboxConfig(kind="bubblewrap")).probe_argv()
    script = " && ".join([*mounts, shlex.join(["exec", "setpriv", *limits, *probe])])
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd="/",
    )


AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="emulating the unit needs root (a mount namespace, then setpriv to nobody)",
)


@needs_tool("bwrap")
@needs_tool("setpriv")
@needs_tool("unshare")
@AS_ROOT
def test_bubblewrap_runs_under_the_worker_units_limits() -> None:
    """The bubblewrap sandbox probe (the sandbox the workers build around agents) succeeds under what the
    worker unit imposes: its /proc mounts, no new privileges, no capabilities, an unprivileged user."""
    result = run_probe_as_the_worker_unit(load(WORKER))
    assert result.returncode == 0, result.stderr


@needs_tool("bwrap")
@needs_tool("setpriv")
@needs_tool("unshare")
@AS_ROOT
@pytest.mark.parametrize("option", list(PROC_MOUNTS))
def test_bubblewrap_fails_under_a_proc_protection(option: str) -> None:
    """With ProtectKernelTunables=, ProtectKernelLogs= or ProtectHostname= in the worker unit, the same
    probe fails: why the unit leaves them out, and proof that the test above can fail."""
    unit = _edit(WORKER, "LockPersonality=yes", f"LockPersonality=yes\n{option}=yes")
    result = run_probe_as_the_worker_unit(unit)
    assert result.returncode != 0 and "proc" in result.stderr, result.stderr
