"""docker-compose.yml, deploy/Dockerfile and the lock files checked against the code, since Docker cannot
run here.

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
import yaml

from service.client.tunings import load_tuning_file
from service.core.errors import ConfigError
from service.core.settings import CONFIG_ENV
from tests.support.dockerfile import (
    STORE_PATH,
    dockerfile_problems,
    exec_form,
    instructions,
)
from tests.support.fleet_cli import argv_problems, cli_commands, is_setting
from tests.support.grace import default_stop_grace_s, parse_duration, release_wait_s
from tests.support.locks import (
    DEV_LOCK,
    RUNTIME_LOCK,
    bound_problems,
    dev_requirements,
    lock_entries,
    lock_problems,
    runtime_requirements,
)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
HEALTH_PATHS = ("/healthz", "/readyz")
LOOPBACK = "127.0.0.1"

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


def dockerfile_of(service: dict[str, Any]) -> tuple[Path, Path] | None:
    """The (context, Dockerfile) a service builds from, or None when it only pulls an image."""
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        build = {"context": build}
    context = (ROOT / str(build.get("context", "."))).resolve()
    return context, context / str(build.get("dockerfile", "Dockerfile"))


def runs_tunefleet(service: dict[str, Any]) -> bool:
    """Whether the service's container runs the tunefleet CLI (our image, entrypoint not overridden)."""
    built = dockerfile_of(service)
    if built is None or not built[1].is_file() or "entrypoint" in service:
        return False
    entry = [exec_form(a) for k, a in instructions(built[1].read_text()) if k == "ENTRYPOINT"]
    return bool(entry) and entry[-1][-1:] == ["tunefleet"]


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
    problems = []
    for name, service in services(compose).items():
        if not runs_tunefleet(service):
            continue
        argv = as_argv(service.get("command"))
        if not argv:
            problems.append(f"{name}: no command (the image would only print --help)")
            continue
        problems += [f"{name}: {problem}" for problem in argv_problems(argv)]
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
    return default_stop_grace_s()


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
        needed = grace + release_wait_s()
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
                    f"+ the {release_wait_s():g} s release wait"
                )
    return problems


def init_problems(compose: Compose) -> list[str]:
    """The image's ENTRYPOINT runs tini as PID 1; `init: true` would put Docker's init above it."""
    return [
        f"{name}: `init: true` doubles the image's tini (ENTRYPOINT already reaps agent processes)"
        for name, service in services(compose).items()
        if runs_tunefleet(service) and service.get("init") is True
    ]


def probe_url(service: dict[str, Any]) -> str | None:
    """The http:// URL a service's healthcheck fetches, if it fetches one."""
    test = (service.get("healthcheck") or {}).get("test") or []
    text = " ".join(str(part) for part in test) if isinstance(test, list) else str(test)
    found = re.search(r"http://[^\s'\"]+", text)
    return found.group(0) if found else None


def health_problems(compose: Compose) -> list[str]:
    """Every service has a healthcheck; tunefleet's probe their own health endpoint on the right port."""
    problems = []
    for name, service in services(compose).items():
        check = service.get("healthcheck") or {}
        if not check.get("test") or check.get("disable"):
            problems.append(f"{name}: no healthcheck")
            continue
        if not runs_tunefleet(service):
            continue
        env = environment(service)
        port_var = "TUNEFLEET_API_PORT" if subcommand_of(service) == "daemon" else "TUNEFLEET_HEALTH_PORT"
        port = env.get(port_var, "")
        url = probe_url(service) or ""
        wanted = [f"http://127.0.0.1:{port}{path}" for path in HEALTH_PATHS]
        if not port or port == "0" or url not in wanted:
            problems.append(f"{name}: healthcheck fetches {url!r}, not one of {wanted} ({port_var}={port!r})")
    return problems


def published_host_ip(entry: Any) -> str | None:
    """The host address of a `ports` entry (short `[ip:]host:container` or long syntax); None when all."""
    if isinstance(entry, dict):
        return str(entry["host_ip"]) if entry.get("host_ip") else None
    text = by_default(str(entry))
    parts = text.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def publish_problems(compose: Compose) -> list[str]:
    """Ports are published on the loopback address by default, never on every interface."""
    problems = []
    for name, service in services(compose).items():
        for entry in service.get("ports") or []:
            if published_host_ip(entry) != LOOPBACK:
                problems.append(f"{name}: port {entry!r} is published beyond {LOOPBACK}")
    return problems


def token_problems(compose: Compose) -> list[str]:
    """The daemon takes its API token from the environment of `docker compose` (or .env), never a literal."""
    problems = []
    daemons = [s for s in services(compose).values() if runs_tunefleet(s) and subcommand_of(s) == "daemon"]
    for service in daemons:
        token = environment(service).get("TUNEFLEET_API_TOKEN", "")
        if not re.fullmatch(r"\$\{TUNEFLEET_API_TOKEN(?:[:?-][^}]*)?\}", token):
            problems.append(f"daemon: TUNEFLEET_API_TOKEN is {token!r}, not ${{TUNEFLEET_API_TOKEN}}")
    return problems


def by_default(value: str) -> str:
    """A compose value with `${NAME:-default}` (or `${NAME-default}`) in it, as it is when NAME is unset."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", r"\1", value)


def fleet_env_problems(compose: Compose) -> list[str]:
    """Every tunefleet service: known TUNEFLEET_* names, the compose Redis, and the shared store volume."""
    problems = []
    names = set(services(compose))
    store_sources = set()
    for name, service in services(compose).items():
        if not runs_tunefleet(service):
            continue
        env = environment(service)
        for var in env:
            if var.startswith("TUNEFLEET_") and var != CONFIG_ENV and not is_setting(var):
                problems.append(f"{name}: {var} is not a fleet setting")
        url = by_default(env.get("TUNEFLEET_REDIS_URL", ""))
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
    "init": init_problems,
    "health": health_problems,
    "publish": publish_problems,
    "token": token_problems,
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


def ignored_by(patterns: list[str], path: str) -> bool:
    """Whether a .dockerignore's patterns (no `!` exceptions) leave `path` out of the build context."""
    parts = PurePosixPath(path).parts
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if any(fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))):
            return True
        if bare != pattern and any(fnmatch(part, bare) for part in parts):
            return True
    return False


def test_build_context_keeps_what_the_image_copies_and_drops_the_rest() -> None:
    """deploy/Dockerfile.dockerignore leaves out the virtualenv, git, caches and .env, but none of the
    paths the Dockerfile copies."""
    text, _ = project_dockerfile()
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "exceptions are not modelled here"
    copied = [
        w for k, a in instructions(text) if k == "COPY" for w in a.split()[:-1] if not w.startswith("--")
    ]
    assert copied and not [c for c in copied if ignored_by(patterns, c)]
    for path in (".venv/bin/python", ".git/HEAD", "service/__pycache__/x.pyc", ".env", "var/bench"):
        assert ignored_by(patterns, path), path
    assert ignored_by(["service"], "service/api/app.py"), "a broken ignore file would be caught"


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
    default = default_stop_grace_s()
    assert effective_stop_grace_s(worker) == default
    worker["stop_grace_period"] = f"{default + release_wait_s():g}s"
    assert any("stop_grace_period" in p for p in worker_problems(compose))


def test_release_wait_is_read_from_the_worker() -> None:
    """The hand-back wait comes from `_stop_when_released` itself: another number there is another result,
    and a timeout of another shape is refused rather than guessed."""
    source = (ROOT / "workers" / "fleet_worker.py").read_text()
    assert "stop_grace_s + 5)" in source, "the worker's hand-back wait changed shape: update this test"
    assert release_wait_s() == 5.0
    assert release_wait_s(source.replace("stop_grace_s + 5)", "stop_grace_s + 12)")) == 12.0
    with pytest.raises(AssertionError):
        release_wait_s(source.replace("stop_grace_s + 5)", "stop_grace_s * 2)"))


def test_lock_files_pin_every_dependency_with_hashes() -> None:
    """The runtime and dev locks pin every dependency of pyproject.toml within its range, with hashes,
    and the runtime lock takes the dev lock's versions (the image runs what the tests ran)."""
    runtime, dev = RUNTIME_LOCK.read_text(), DEV_LOCK.read_text()
    assert lock_problems(runtime, runtime_requirements()) == []
    assert lock_problems(dev, dev_requirements()) == []
    dev_pins = lock_entries(dev)
    for name, (version, _) in lock_entries(runtime).items():
        assert dev_pins[name][0] == version, f"{name}: runtime lock {version}, dev lock {dev_pins[name][0]}"


def test_a_lock_that_drifts_is_caught() -> None:
    """A pin outside pyproject's range, a pin without hashes, or a dependency missing from the lock is
    reported."""
    runtime = RUNTIME_LOCK.read_text()
    pin = re.search(r"^pydantic==(\S+)", runtime, re.MULTILINE)
    assert pin is not None
    assert lock_problems(runtime.replace(pin.group(0), "pydantic==1.10.0"), runtime_requirements()) != []
    unhashed = re.sub(r"(?m)^(pydantic==\S+) \\\n(\s+--hash=\S+( \\)?\n)+", r"\1\n", runtime)
    assert unhashed != runtime and lock_problems(unhashed, runtime_requirements()) != []
    assert lock_problems(runtime, [*runtime_requirements(), "left-pad>=1"]) != []


def test_runtime_dependencies_have_compatible_ranges() -> None:
    """Every runtime dependency has an upper bound as well as a lower one, and a missing bound is caught."""
    assert bound_problems(runtime_requirements()) == []
    assert bound_problems(["structlog>=24.1"]) != []
    assert bound_problems(["structlog<30"]) != []


def test_bootstrap_installs_from_the_lock_and_reinstalls_when_it_changes() -> None:
    """scripts/bootstrap.sh installs the dev lock with hashes (all of it but llama-cpp-python, which
    scripts/local_model.sh builds from the lock's hashed sdist) and its stamp depends on the lock file."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    lock = DEV_LOCK.relative_to(ROOT).as_posix()
    assert f"lock={lock}" in script
    assert re.search(r"awk '/\^llama-cpp-python==/[^\n]*' \"\$lock\" >var/dev-without-llama.lock", script)
    assert re.search(r"pip install [^\n]*--require-hashes[^\n]*-r var/dev-without-llama.lock", script)
    model = (ROOT / "scripts" / "local_model.sh").read_text()
    assert re.search(r"pip wheel [^\n]*--require-hashes", model) and 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in model
    assert '[ "$lock" -nt "$stamp" ]' in script


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
    "doubled init": (_set("worker.init", True), init_problems),
    "daemon without healthcheck": (_set("daemon.healthcheck", None), health_problems),
    "redis without healthcheck": (_set("redis.healthcheck", None), health_problems),
    "worker probes the wrong port": (_env("worker", "TUNEFLEET_HEALTH_PORT", "9999"), health_problems),
    "worker health off": (_env("worker", "TUNEFLEET_HEALTH_PORT", None), health_problems),
    "api on every interface": (_set("daemon.ports", ["8321:8321"]), publish_problems),
    "api bound to all by default": (
        _set("daemon.ports", ["${TUNEFLEET_API_BIND:-0.0.0.0}:8321:8321"]),
        publish_problems,
    ),
    "literal token": (_env("daemon", "TUNEFLEET_API_TOKEN", "hunter2"), token_problems),
    "no token": (_env("daemon", "TUNEFLEET_API_TOKEN", None), token_problems),
    "misspelt setting": (_env("worker", "TUNEFLEET_STOP_GRACE", "10"), fleet_env_problems),
    "redis url elsewhere": (
        _env("daemon", "TUNEFLEET_REDIS_URL", "redis://localhost:6379/0"),
        fleet_env_problems,
    ),
    "redis url defaults elsewhere": (
        _env("worker", "TUNEFLEET_REDIS_URL", "${TUNEFLEET_REDIS_URL:-redis://localhost:6379/0}"),
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
    "unpinned base": ("FROM python:3.11.14-slim-bookworm", "FROM python:3.11-slim"),
    "other base": ("FROM python:3.11.14-slim-bookworm", "FROM python:3.12.1-slim-bookworm"),
    "base by tag only": ("-slim-bookworm@sha256:", "-slim-bookworm #"),
    "never installed": ("RUN pip install ", "RUN echo "),
    "hashes not required": ("pip install --require-hashes ", "pip install "),
    "lock not copied": ("COPY requirements/runtime.lock", "COPY requirements/dev.lock"),
    "project resolves": ("pip install --no-deps --no-build-isolation /tmp", "pip install /tmp"),
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
    """Every metric the Grafana dashboard queries is one that the daemon's collectors export
    (service/metrics.py, service/kinds/goals/metrics.py and service/kinds/evals/metrics.py)."""
    import json
    import re

    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"tunefleet_[a-z_]+", e)}
    source = "".join(
        (ROOT / "service" / name).read_text()
        for name in ("metrics.py", "kinds/goals/metrics.py", "kinds/evals/metrics.py")
    )
    exported = set(re.findall(r'"(?:\{NAMESPACE\}_)?([a-z_]+)"', source))
    for metric in used:
        base = re.sub(r"_(total|bucket|count|sum)$", "", metric.removeprefix("tunefleet_"))
        assert base in exported, f"{metric} is not exported by the daemon's collectors"
    assert len(dashboard["panels"]) >= 8
