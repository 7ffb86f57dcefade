"""docker-compose.yml keeps agents away from the fleet: it validates against the compose-spec schema,
Redis has one ACL user per role and no default user, the workers get no API token and no other user's
password, third-party images are pinned by digest; and deploy/seccomp/bubblewrap.json, loaded into a
process as a container runtime would, lets a bubblewrap agent start and refuses what it denies."""

from __future__ import annotations

import copy
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.tools import require_tool
from tests.test_deploy_files import (
    ROOT,
    Compose,
    as_argv,
    environment,
    load_compose,
    mounts,
    runs_tunefleet,
    services,
    subcommand_of,
)

COMPOSE_SPEC = Path(__file__).parent / "schemas" / "compose-spec.json"
"""compose-spec/compose-spec's schema/compose-spec.json (Apache-2.0), at commit 170098ba07d9 (June 2026)."""
SECCOMP_PROFILE = ROOT / "deploy" / "seccomp" / "bubblewrap.json"
LAUNCH = Path(__file__).parent / "support" / "seccomp_launch.py"
SYSTEM_PYTHON = "/usr/bin/python3"
ROLE_USERS = {"worker": "worker", "daemon": "submitter"}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
KEYCTL = {"x86_64": 250, "aarch64": 219}
"""The number of keyctl(2), a call the profile refuses, on the machines CI runs on."""


def schema_problems(compose: Compose) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SPEC.read_text()))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]


def acl_problems(compose: Compose) -> list[str]:
    """Redis loads deploy/redis's users (no default user, no shared password); every daemon and worker
    connects as its own user with that user's password from .env."""
    problems = []
    redis = services(compose)["redis"]
    argv = as_argv(redis.get("command"))
    if "--aclfile" not in argv or "--requirepass" in argv:
        problems.append(f"redis: not started with the ACL file alone ({argv})")
    if not any(m.source == "./deploy/redis" for m in mounts(redis)):
        problems.append("redis: deploy/redis (users.acl) is not mounted")
    for name, service in services(compose).items():
        user = ROLE_USERS.get(subcommand_of(service) or "") if runs_tunefleet(service) else None
        if user is None:
            continue
        env = environment(service)
        if f"//{user}@" not in env.get("TUNEFLEET_REDIS_URL", ""):
            problems.append(
                f"{name}: TUNEFLEET_REDIS_URL {env.get('TUNEFLEET_REDIS_URL')!r} is not user {user}"
            )
        if not env.get("TUNEFLEET_REDIS_PASSWORD", "").startswith(f"${{REDIS_{user.upper()}_PASSWORD"):
            problems.append(f"{name}: TUNEFLEET_REDIS_PASSWORD is not {user}'s")
    return problems


def worker_secret_problems(compose: Compose) -> list[str]:
    """No worker gets an API token or a variable holding another Redis user's password."""
    problems = []
    for name, service in services(compose).items():
        if not runs_tunefleet(service) or subcommand_of(service) != "worker":
            continue
        for var, value in environment(service).items():
            if var in ("TUNEFLEET_API_TOKEN", "TUNEFLEET_API_READ_TOKEN") or "API_TOKEN" in value:
                problems.append(f"{name}: the worker gets the API token ({var})")
            elif "PASSWORD" in value and "REDIS_WORKER_PASSWORD" not in value:
                problems.append(f"{name}: {var} holds another user's password ({value})")
    return problems


def image_problems(compose: Compose) -> list[str]:
    """Every image the compose file pulls (not one it builds) is pinned by digest."""
    return [
        f"{name}: image {service.get('image')!r} is not pinned by digest"
        for name, service in services(compose).items()
        if "build" not in service and not DIGEST.search(str(service.get("image", "")))
    ]


CHECKS: dict[str, Callable[[Compose], list[str]]] = {
    "compose-spec": schema_problems,
    "redis acl": acl_problems,
    "worker secrets": worker_secret_problems,
    "images": image_problems,
}


@pytest.mark.parametrize("check", list(CHECKS))
def test_compose_file_keeps_the_agents_out(check: str) -> None:
    """The repository's docker-compose.yml has no problem of this kind."""
    assert CHECKS[check](load_compose()) == []


def _env(service: str, name: str, value: str) -> Callable[[Compose], None]:
    def mutate(compose: Compose) -> None:
        services(compose)[service].setdefault("environment", {})[name] = value

    return mutate


def _set(service: str, key: str, value: Any) -> Callable[[Compose], None]:
    return lambda compose: services(compose)[service].update({key: value})


BROKEN: dict[str, tuple[Callable[[Compose], None], Callable[[Compose], list[str]]]] = {
    "misspelt service field": (_set("worker", "stop_grace", "30s"), schema_problems),
    "misspelt healthcheck field": (
        lambda c: services(c)["redis"]["healthcheck"].update(intervall="5s"),
        schema_problems,
    ),
    "redis with one password": (
        _set("redis", "command", ["redis-server", "--requirepass", "x", "--appendonly", "yes"]),
        acl_problems,
    ),
    "worker as the default user": (
        _env("worker", "TUNEFLEET_REDIS_URL", "redis://redis:6379/0"),
        acl_problems,
    ),
    "daemon as worker": (_env("daemon", "TUNEFLEET_REDIS_URL", "redis://worker@redis:6379/0"), acl_problems),
    "worker gets the api token": (
        _env("worker", "TUNEFLEET_API_TOKEN", "${TUNEFLEET_API_TOKEN}"),
        worker_secret_problems,
    ),
    "worker gets the submitter's password": (
        _env("worker-sandboxed", "TUNEFLEET_REDIS_PASSWORD", "${REDIS_SUBMITTER_PASSWORD}"),
        worker_secret_problems,
    ),
    "redis by tag": (_set("redis", "image", "redis:7.2.5"), image_problems),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_compose_is_caught(case: str) -> None:
    """A compose file broken in this way is reported by the check responsible for it."""
    mutate, check = BROKEN[case]
    compose = copy.deepcopy(load_compose())
    mutate(compose)
    assert check(compose) != []


def _launch_seccomp() -> str:
    """The system Python with libseccomp's binding, or a skip (a failure under CI=true)."""
    found = shutil.which(SYSTEM_PYTHON)
    works = (
        found and subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], capture_output=True).returncode == 0
    )
    if not works:
        if os.environ.get("CI") == "true":
            pytest.fail("python3-seccomp is not installed (CI=true: a missing tool fails the test)")
        pytest.skip("python3-seccomp is not installed (make setup-test installs it)")
    return SYSTEM_PYTHON


AGENT = f"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
number = {KEYCTL.get(platform.machine(), -1)}
refused = libc.syscall(number, 0, 0, 0, 0) == -1 and ctypes.get_errno() == errno.EPERM
print(json.dumps({{"uid": os.getuid(), "pid": os.getpid(), "keyctl_refused": refused}}))
"""


def _sandboxed(uid: int, profile: Path) -> subprocess.CompletedProcess[str]:
    bwrap = require_tool("bwrap")
    wrapped = [
        bwrap,
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
    ]
    wrapped += [
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--unshare-all",
        "--clearenv",
    ]
    wrapped += ["--die-with-parent", "--", SYSTEM_PYTHON, "-c", AGENT]
    return subprocess.run(
        [_launch_seccomp(), str(LAUNCH), str(profile), str(uid), "--", *wrapped],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(
    platform.machine() not in KEYCTL, reason="keyctl's number is known for x86_64 and aarch64"
)
def test_a_bubblewrap_agent_runs_under_the_shipped_seccomp_profile() -> None:
    """Under deploy/seccomp/bubblewrap.json, as a non-root user (as the worker container runs), bubblewrap
    makes its namespaces and the agent runs in them as PID 1 of its own, while keyctl, which the profile
    refuses, fails with EPERM inside the sandbox."""
    done = _sandboxed(65534, SECCOMP_PROFILE)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["pid"] <= 2 and seen["keyctl_refused"] is True, seen


def test_a_profile_that_refuses_namespaces_stops_bubblewrap(tmp_path: Path) -> None:
    """The same launch under a profile that also refuses unshare and clone's namespace flags (as the
    runtimes' defaults do for a process without CAP_SYS_ADMIN) fails: the test sees the profile at work."""
    profile = json.loads(SECCOMP_PROFILE.read_text())
    profile["syscalls"].append({"names": ["unshare", "clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1})
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps(profile))
    done = _sandboxed(65534, strict)
    assert done.returncode != 0 and "keyctl_refused" not in done.stdout


SYSTEMD = ROOT / "deploy" / "systemd"


def _unit_env_files(unit: str) -> list[Path]:
    """The examples of the environment files a unit reads (/etc/tunefleet/X.env -> X.env.example)."""
    files = re.findall(r"^EnvironmentFile=-?/etc/tunefleet/(\S+)$", (SYSTEMD / unit).read_text(), re.M)
    return [SYSTEMD / f"{name}.example" for name in files]


def test_systemd_workers_read_no_api_token() -> None:
    """Every environment file the worker unit reads exists as an example and holds no API token and no
    other user's Redis URL; the daemon's own file holds the token."""
    worker_files = _unit_env_files("tunefleet-worker@.service")
    assert worker_files and all(path.is_file() for path in worker_files)
    for path in worker_files:
        text = path.read_text()
        assert not re.search(r"^\s*TUNEFLEET_API(_READ)?_TOKEN=", text, re.M), path
        assert "submitter@" not in text, path
    daemon_text = "".join(p.read_text() for p in _unit_env_files("tunefleet-daemon.service"))
    assert re.search(r"^TUNEFLEET_API_TOKEN=", daemon_text, re.M)
