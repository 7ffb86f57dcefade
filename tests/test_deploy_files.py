"""docker-compose.yml and deploy/Dockerfile checked against the code, since Docker cannot run here.

Each check is a function that returns the problems it finds; the real files must have none, and
deliberately broken copies must have some (so a check that can never fail is caught too).
"""

from __future__ import annotations

import copy
import itertools
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import typer
import yaml

from service.cli import app
from service.errors import ConfigError
from service.settings import FleetSettings
from service.tunings import load_tuning_file

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENTRYPOINT = ["tini", "--", "tunefleet"]
STORE_PATH = "/store"
RELEASE_WAIT_S = 5.0
"""How long a stopping worker waits, beyond the agents' grace, for its cases to go back to the queue
(workers/fleet_worker.py, `_stop_when_released`)."""
REQUIRED_PACKAGES = ("git", "tini", "bubblewrap")

Compose = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Reading the files


def load_compose(path: Path = COMPOSE_FILE) -> Compose:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path}: expected a mapping"
    return data


def services(compose: Compose) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict) and found, "docker-compose.yml: no services"
    return found


def as_argv(value: Any) -> list[str]:
    """A compose `command`/`entrypoint` (list or shell-like string) as an argv list."""
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(item) for item in value]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's `environment`, in either compose syntax (mapping or list of NAME=value)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (str(item).partition("=") for item in env)
        return {name: value for name, _, value in pairs}
    return {str(name): "" if value is None else str(value) for name, value in env.items()}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    bind: bool


def mounts(service: dict[str, Any]) -> list[Mount]:
    """A service's volumes, short (`src:dst[:mode]`) or long syntax; bind mounts have a path source."""
    found = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            source, target = str(entry.get("source", "")), str(entry["target"])
            bind = entry.get("type") == "bind"
        else:
            parts = str(entry).split(":")
            if len(parts) == 1:
                found.append(Mount(source="", target=parts[0], bind=False))
                continue
            source, target = parts[0], parts[1]
            bind = source.startswith((".", "/", "~"))
        found.append(Mount(source=source, target=target, bind=bind))
    return found


def parse_duration(text: str) -> float:
    """A compose duration (`30s`, `1m30s`, `1500ms`) in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_of(service: dict[str, Any]) -> tuple[Path, Path] | None:
    """The (context, Dockerfile) a service builds from, or None when it only pulls an image."""
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        build = {"context": build}
    context = (ROOT / str(build.get("context", "."))).resolve()
    return context, context / str(build.get("dockerfile", "Dockerfile"))


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, args = whole.partition(" ")
            result.append((keyword.upper(), args.strip()))
    return result


def exec_form(args: str) -> list[str]:
    """The argv of an ENTRYPOINT/CMD, in exec (JSON) or shell form."""
    value = yaml.safe_load(args) if args.startswith("[") else None
    return [str(v) for v in value] if isinstance(value, list) else shlex.split(args)


def runs_tunefleet(service: dict[str, Any]) -> bool:
    """Whether the service's container runs the tunefleet CLI (our image, entrypoint not overridden)."""
    built = dockerfile_of(service)
    if built is None or not built[1].is_file() or "entrypoint" in service:
        return False
    entry = [exec_form(a) for k, a in instructions(built[1].read_text()) if k == "ENTRYPOINT"]
    return bool(entry) and entry[-1][-1:] == ["tunefleet"]


def cli_group() -> Any:
    """The CLI's command group (typer's own vendored click group; its subcommands are `.commands`)."""
    return typer.main.get_command(app)


def cli_commands() -> dict[str, Any]:
    commands = getattr(cli_group(), "commands", None)
    assert isinstance(commands, dict) and commands, "service.cli.app has no subcommands"
    return commands


def subcommand_of(service: dict[str, Any]) -> str | None:
    argv = as_argv(service.get("command"))
    return argv[0] if argv else None


# ---------------------------------------------------------------------------------------------
# The checks: each returns a list of problems, empty when the files are right


def build_problems(compose: Compose) -> list[str]:
    problems = []
    for name, service in services(compose).items():
        built = dockerfile_of(service)
        if built is None:
            continue
        context, dockerfile = built
        if not context.is_dir():
            problems.append(f"{name}: build context {context} does not exist")
        if not dockerfile.is_file():
            problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
    return problems


def mount_problems(compose: Compose) -> list[str]:
    problems = []
    declared = set((compose.get("volumes") or {}).keys())
    for name, service in services(compose).items():
        for mount in mounts(service):
            if mount.bind:
                host = (ROOT / mount.source).resolve()
                if not host.exists():
                    problems.append(f"{name}: bind-mounted host path {mount.source} ({host}) does not exist")
            elif mount.source and mount.source not in declared:
                problems.append(f"{name}: named volume {mount.source!r} is not declared under `volumes`")
    return problems


def command_problems(compose: Compose) -> list[str]:
    """Every command of a tunefleet service must parse as a real subcommand with valid arguments."""
    group, commands = cli_group(), cli_commands()
    problems = []
    for name, service in services(compose).items():
        if not runs_tunefleet(service):
            continue
        argv = as_argv(service.get("command"))
        if not argv:
            problems.append(f"{name}: no command (the image would only print --help)")
            continue
        command = commands.get(argv[0])
        if command is None:
            known = ", ".join(sorted(commands))
            problems.append(f"{name}: `tunefleet {argv[0]}` is not a subcommand (known: {known})")
            continue
        parent = typer.Context(group, info_name="tunefleet")
        try:
            command.make_context(argv[0], list(argv[1:]), parent=parent)
        except (typer.TyperException, typer.Exit) as exc:
            problems.append(f"{name}: `tunefleet {' '.join(argv)}` does not parse: {exc}")
    return problems


def host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """Where a path inside the container lives on the host, when it is below a bind mount."""
    inside = PurePosixPath(container_path)
    for mount in mounts(service):
        target = PurePosixPath(mount.target)
        if mount.bind and (inside == target or target in inside.parents):
            return (ROOT / mount.source).resolve() / inside.relative_to(target)
    return None


def tuning_file_problems(compose: Compose) -> list[str]:
    """The tuning files a daemon is given must be bind-mounted into it and load as valid tunings."""
    problems = []
    for name, service in services(compose).items():
        if not runs_tunefleet(service) or subcommand_of(service) != "daemon":
            continue
        files = [a for a in as_argv(service.get("command"))[1:] if not a.startswith("-")]
        for file in files:
            host = host_path(service, file)
            if host is None:
                problems.append(f"{name}: tuning file {file} is not below any bind mount of the service")
                continue
            try:
                load_tuning_file(host)
            except ConfigError as exc:
                problems.append(f"{name}: tuning file {file} ({host}): {exc}")
    return problems


def effective_stop_grace_s(service: dict[str, Any]) -> float:
    configured = environment(service).get("TUNEFLEET_STOP_GRACE_S")
    if configured is not None:
        return float(configured)
    default = FleetSettings.model_fields["stop_grace_s"].default
    assert isinstance(default, float)
    return default


def worker_problems(compose: Compose) -> list[str]:
    problems = []
    workers = {
        n: s for n, s in services(compose).items() if runs_tunefleet(s) and subcommand_of(s) == "worker"
    }
    if not workers:
        problems.append("no service runs `tunefleet worker`")
    for name, service in workers.items():
        replicas = (service.get("deploy") or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas <= 1:
            problems.append(f"{name}: deploy.replicas is {replicas!r}; a fleet needs more than one worker")
        grace = effective_stop_grace_s(service)
        needed = grace + RELEASE_WAIT_S
        period_text = service.get("stop_grace_period")
        if period_text is None:
            problems.append(
                f"{name}: no stop_grace_period (compose's 10 s default); needs more than {needed:g} s"
            )
        else:
            period = parse_duration(str(period_text))
            if period <= needed:
                problems.append(
                    f"{name}: stop_grace_period {period_text} is not longer than stop_grace_s {grace:g} s "
                    f"+ the {RELEASE_WAIT_S:g} s release wait"
                )
        if service.get("init") is not True:
            problems.append(f"{name}: `init: true` is missing (killed agent processes must be reaped)")
    return problems


def fleet_env_problems(compose: Compose) -> list[str]:
    """Every tunefleet service: known TUNEFLEET_* names, the compose Redis, and the shared store volume."""
    problems = []
    names = set(services(compose))
    fields = set(FleetSettings.model_fields)
    store_sources = set()
    for name, service in services(compose).items():
        if not runs_tunefleet(service):
            continue
        env = environment(service)
        for var in env:
            setting = var.removeprefix("TUNEFLEET_").lower()
            if var.startswith("TUNEFLEET_") and var != "TUNEFLEET_CONFIG" and setting not in fields:
                problems.append(f"{name}: {var} is not a fleet setting")
        url = env.get("TUNEFLEET_REDIS_URL", "")
        host = re.sub(r"^rediss?://(?:[^@/]*@)?([^:/]+).*$", r"\1", url)
        if not url or host not in names:
            problems.append(f"{name}: TUNEFLEET_REDIS_URL {url!r} does not point at a compose service")
        store = env.get("TUNEFLEET_STORE", STORE_PATH)
        at_store = [m for m in mounts(service) if m.target == store]
        if not at_store or at_store[0].bind:
            problems.append(f"{name}: no named volume mounted at the store path {store}")
        else:
            store_sources.add(at_store[0].source)
    if len(store_sources) > 1:
        problems.append(f"the tunefleet services mount different store volumes: {sorted(store_sources)}")
    return problems


def redis_problems(compose: Compose) -> list[str]:
    redis = services(compose).get("redis")
    if redis is None:
        return ["no `redis` service"]
    problems = []
    argv = as_argv(redis.get("command"))
    on = any(a == "--appendonly" and b == "yes" for a, b in itertools.pairwise(argv))
    if not on:
        problems.append(f"redis: append-only file is not on (command {argv})")
    if not str(redis.get("image", "")).startswith("redis:7"):
        problems.append(f"redis: image {redis.get('image')!r} is not redis:7")
    if not redis.get("healthcheck"):
        problems.append("redis: no healthcheck")
    if not any(m.target == "/data" and m.source for m in mounts(redis)):
        problems.append("redis: /data is not on a volume (the AOF would die with the container)")
    return problems


def copy_problems(steps: list[tuple[str, str]], context: Path) -> list[str]:
    """Every COPY/ADD source (not from another stage) must exist in the build context."""
    problems = []
    for keyword, args in steps:
        if keyword not in ("COPY", "ADD") or "--from" in args:
            continue
        words = exec_form(args) if args.startswith("[") else args.split()
        paths = [w for w in words if not w.startswith("--")]
        for source in paths[:-1]:
            if not (context / source).exists():
                problems.append(f"{keyword} source {source!r} does not exist in the build context {context}")
    return problems


def dockerfile_problems(text: str, context: Path) -> list[str]:
    steps = instructions(text)
    problems = copy_problems(steps, context)
    froms = [a for k, a in steps if k == "FROM"]
    if not froms or not froms[0].split()[0].startswith("python:3.11-slim"):
        problems.append(f"FROM is {froms[:1]}, not python:3.11-slim")
    installs = " ".join(a for k, a in steps if k == "RUN" and "apt-get" in a and "install" in a)
    installed = set(installs.split())
    for package in REQUIRED_PACKAGES:
        if package not in installed:
            problems.append(f"apt-get install does not install {package}")
    if not any(k == "RUN" and re.search(r"\bpip install\b", a) for k, a in steps):
        problems.append("the project is never installed with `pip install`")
    users = [a.split()[0] for k, a in steps if k == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"the image runs as {users[-1] if users else 'root'}, not a non-root user")
    env_text = " ".join(a for k, a in steps if k == "ENV")
    if not re.search(rf"(^|\s)TUNEFLEET_STORE={re.escape(STORE_PATH)}(\s|$)", env_text):
        problems.append(f"ENV TUNEFLEET_STORE={STORE_PATH} is missing")
    entries = [exec_form(a) for k, a in steps if k == "ENTRYPOINT"]
    if not entries or entries[-1] != ENTRYPOINT:
        problems.append(f"ENTRYPOINT is {entries[-1] if entries else None}, not {ENTRYPOINT}")
    return problems


def _glob_match(path: PurePosixPath, pattern: str) -> bool:
    """Whether `path` matches a setuptools package-data glob (`*` does not cross a `/`)."""
    parts = PurePosixPath(pattern).parts
    return len(parts) == len(path.parts) and all(
        fnmatch(p, q) for p, q in zip(path.parts, parts, strict=True)
    )


def package_data_problems(pyproject: dict[str, Any], root: Path) -> list[str]:
    """Every file of the packages that is not Python must be declared as package data, or a regular
    (non-editable) install such as the image's `pip install .` leaves it out."""
    setuptools = pyproject.get("tool", {}).get("setuptools", {})
    includes = setuptools.get("packages", {}).get("find", {}).get("include", [])
    tops = sorted({pattern.split(".")[0].rstrip("*") for pattern in includes})
    declared: dict[str, list[str]] = setuptools.get("package-data", {})
    problems = []
    for top in tops:
        for file in sorted((root / top).rglob("*")):
            if not file.is_file() or file.suffix in (".py", ".pyc") or "__pycache__" in file.parts:
                continue
            rel = PurePosixPath(file.relative_to(root).as_posix())
            covered = False
            for package, patterns in declared.items():
                base = PurePosixPath(*package.split(".")) if package != "*" else None
                if base is not None and base not in rel.parents:
                    continue
                inside = rel.relative_to(base) if base is not None else PurePosixPath(rel.name)
                covered = covered or any(_glob_match(inside, pattern) for pattern in patterns)
            if not covered:
                problems.append(
                    f"{rel} is not declared in [tool.setuptools.package-data]: `pip install .` omits it"
                )
    return problems


def project_dockerfile() -> tuple[str, Path]:
    """The text and build context of the Dockerfile the compose file builds the fleet from."""
    for service in services(load_compose()).values():
        built = dockerfile_of(service)
        if built is not None:
            return built[1].read_text(), built[0]
    raise AssertionError("no service of docker-compose.yml builds an image")


# ---------------------------------------------------------------------------------------------
# The real files


COMPOSE_CHECKS: dict[str, Callable[[Compose], list[str]]] = {
    "build": build_problems,
    "mounts": mount_problems,
    "commands": command_problems,
    "tuning files": tuning_file_problems,
    "workers": worker_problems,
    "fleet env": fleet_env_problems,
    "redis": redis_problems,
}


@pytest.mark.parametrize("check", list(COMPOSE_CHECKS))
def test_compose_file_passes(check: str) -> None:
    """The repository's docker-compose.yml has no problem of this kind."""
    assert COMPOSE_CHECKS[check](load_compose()) == []


def test_compose_runs_daemon_and_workers() -> None:
    """The compose file runs both a daemon and workers, and the CLI has both subcommands."""
    used = {subcommand_of(s) for s in services(load_compose()).values() if runs_tunefleet(s)}
    assert {"daemon", "worker"} <= used
    assert {"daemon", "worker"} <= set(cli_commands())


def test_dockerfile_passes() -> None:
    """The Dockerfile the compose file builds copies existing files, installs git, tini and bubblewrap,
    installs the project, and runs tunefleet under tini as a non-root user."""
    text, context = project_dockerfile()
    assert dockerfile_problems(text, context) == []


def test_package_data_is_installed() -> None:
    """Every non-Python file of the packages (the dashboard) is package data, so the image installs it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert package_data_problems(pyproject, ROOT) == []


def test_undeclared_package_data_is_caught(tmp_path: Path) -> None:
    """A data file that no package-data glob covers is reported, and a covering glob clears it."""
    (tmp_path / "pkg" / "static").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "static" / "app.js").write_text("")
    config: dict[str, Any] = {"tool": {"setuptools": {"packages": {"find": {"include": ["pkg*"]}}}}}
    assert package_data_problems(config, tmp_path) != []
    config["tool"]["setuptools"]["package-data"] = {"pkg": ["static/*.js"]}
    assert package_data_problems(config, tmp_path) == []
    config["tool"]["setuptools"]["package-data"] = {"pkg": ["*.js"]}
    assert package_data_problems(config, tmp_path) != []


def test_default_grace_needs_a_longer_stop_period() -> None:
    """A worker without TUNEFLEET_STOP_GRACE_S is held to the settings' default grace."""
    compose = load_compose()
    worker = services(compose)["worker"]
    worker["environment"] = {k: v for k, v in environment(worker).items() if k != "TUNEFLEET_STOP_GRACE_S"}
    default = FleetSettings.model_fields["stop_grace_s"].default
    assert effective_stop_grace_s(worker) == default
    worker["stop_grace_period"] = f"{default + RELEASE_WAIT_S:g}s"
    assert any("stop_grace_period" in p for p in worker_problems(compose))


# ---------------------------------------------------------------------------------------------
# Broken copies: each check must catch what it is for


def _set(path: str, value: Any) -> Callable[[Compose], None]:
    """A mutation that sets `services.<path>` (dot-separated) to `value`."""

    def mutate(compose: Compose) -> None:
        keys = path.split(".")
        node = services(compose)
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def _env(service: str, name: str, value: str | None) -> Callable[[Compose], None]:
    def mutate(compose: Compose) -> None:
        target = services(compose)[service]
        env = environment(target)
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
        target["environment"] = env

    return mutate


BROKEN: dict[str, tuple[Callable[[Compose], None], Callable[[Compose], list[str]]]] = {
    "missing dockerfile": (
        _set("worker.build", {"context": ".", "dockerfile": "deploy/Nope"}),
        build_problems,
    ),
    "missing build context": (_set("daemon.build", {"context": "no-such-dir"}), build_problems),
    "missing bind source": (
        _set("daemon.volumes", ["store:/store", "./no-such-dir:/examples"]),
        mount_problems,
    ),
    "undeclared volume": (_set("worker.volumes", ["elsewhere:/store"]), mount_problems),
    "unknown subcommand": (_set("worker.command", ["wroker"]), command_problems),
    "bad option": (_set("worker.command", ["worker", "--no-such-option"]), command_problems),
    "daemon without tuning": (_set("daemon.command", ["daemon"]), command_problems),
    "no command": (_set("worker.command", None), command_problems),
    "tuning file not mounted": (
        _set("daemon.command", ["daemon", "/elsewhere/tuning.yaml"]),
        tuning_file_problems,
    ),
    "tuning file missing": (
        _set("daemon.command", ["daemon", "/examples/demo/nope.yaml"]),
        tuning_file_problems,
    ),
    "one replica": (_set("worker.deploy", {"replicas": 1}), worker_problems),
    "short stop grace": (_set("worker.stop_grace_period", "12s"), worker_problems),
    "no stop grace": (_set("worker.stop_grace_period", None), worker_problems),
    "grace raised past the period": (_env("worker", "TUNEFLEET_STOP_GRACE_S", "60"), worker_problems),
    "no init": (_set("worker.init", False), worker_problems),
    "misspelt setting": (_env("worker", "TUNEFLEET_STOP_GRACE", "10"), fleet_env_problems),
    "redis url elsewhere": (
        _env("daemon", "TUNEFLEET_REDIS_URL", "redis://localhost:6379/0"),
        fleet_env_problems,
    ),
    "no store volume": (_set("worker.volumes", ["./examples:/examples:ro"]), fleet_env_problems),
    "no appendonly": (_set("redis.command", ["redis-server"]), redis_problems),
    "appendonly off": (_set("redis.command", ["redis-server", "--appendonly", "no"]), redis_problems),
    "no healthcheck": (_set("redis.healthcheck", None), redis_problems),
    "redis data not kept": (_set("redis.volumes", []), redis_problems),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_compose_is_caught(case: str) -> None:
    """A compose file broken in this way is reported by the check responsible for it."""
    mutate, check = BROKEN[case]
    compose = copy.deepcopy(load_compose())
    mutate(compose)
    assert check(compose) != []


DOCKERFILE_BREAKS: dict[str, tuple[str, str]] = {
    "no git": ("git tini bubblewrap", "tini bubblewrap"),
    "no tini": ("git tini bubblewrap", "git bubblewrap"),
    "no bubblewrap": ("git tini bubblewrap", "git tini"),
    "missing copy source": ("COPY workers ", "COPY no-such-dir "),
    "runs as root": ("USER tunefleet", "USER root"),
    "no store env": ("TUNEFLEET_STORE=/store", "TUNEFLEET_STORE=/data"),
    "other entrypoint": ('ENTRYPOINT ["tini", "--", "tunefleet"]', 'ENTRYPOINT ["tunefleet"]'),
    "other base": ("FROM python:3.11-slim", "FROM python:3.12"),
    "never installed": ("RUN pip install ", "RUN echo "),
}


@pytest.mark.parametrize("case", list(DOCKERFILE_BREAKS))
def test_broken_dockerfile_is_caught(case: str) -> None:
    """A Dockerfile broken in this way is reported."""
    text, context = project_dockerfile()
    old, new = DOCKERFILE_BREAKS[case]
    assert old in text, f"the Dockerfile no longer contains {old!r}: update this test"
    assert dockerfile_problems(text.replace(old, new), context) != []


def test_parse_duration() -> None:
    """Compose durations are read in seconds, and anything else is refused."""
    assert parse_duration("30s") == 30
    assert parse_duration("1m30s") == 90
    assert parse_duration("1500ms") == 1.5
    with pytest.raises(ValueError):
        parse_duration("30")


def test_the_grafana_dashboard_plots_only_metrics_the_daemon_exports() -> None:
    """Every metric the Grafana dashboard queries is one that service/metrics.py exports."""
    import json
    import re

    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"tunefleet_[a-z_]+", e)}
    source = (ROOT / "service" / "metrics.py").read_text()
    exported = set(re.findall(r'"(?:\{NAMESPACE\}_)?([a-z_]+)"', source))
    for metric in used:
        base = re.sub(r"_(total|bucket|count|sum)$", "", metric.removeprefix("tunefleet_"))
        assert base in exported, f"{metric} is not exported by service/metrics.py"
    assert len(dashboard["panels"]) >= 8
