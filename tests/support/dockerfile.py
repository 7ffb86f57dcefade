"""deploy/Dockerfile read as instructions, and checked: base image, packages, the locked install, the
user, the store and the entrypoint."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

import yaml

from tests.support.locks import ROOT, RUNTIME_LOCK

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
ENTRYPOINT = ["tini", "--", "tunefleet"]
STORE_PATH = "/store"
REQUIRED_PACKAGES = ("git", "tini", "bubblewrap")


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
    if not froms or not re.fullmatch(PINNED_BASE, froms[0].split()[0]):
        problems.append(f"FROM is {froms[:1]}, not python:3.11.<patch>-slim-<debian>@sha256:<digest>")
    problems += pip_problems(steps)
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


PINNED_BASE = r"python:3\.11\.\d+-slim-(bookworm|trixie)@sha256:[0-9a-f]{64}"
"""A tag can be pushed again; its digest cannot: the base is pinned by both."""


def pip_problems(steps: list[tuple[str, str]]) -> list[str]:
    """The image installs its dependencies from the runtime lock, hashes required, and then the project
    without resolving anything else."""
    problems = []
    installs = [shlex.split(a) for k, a in steps if k == "RUN" and re.search(r"\bpip install\b", a)]
    copied = {w for k, a in steps if k == "COPY" for w in a.split()[:-1]}
    lock_name = RUNTIME_LOCK.relative_to(ROOT).as_posix()
    from_lock = [
        argv
        for argv in installs
        if "-r" in argv and argv[argv.index("-r") + 1].endswith(lock_name) and "--require-hashes" in argv
    ]
    if not from_lock:
        problems.append(f"no `pip install --require-hashes -r .../{lock_name}`")
    if lock_name not in copied:
        problems.append(f"{lock_name} is never copied into the image")
    project = [argv for argv in installs if "-r" not in argv]
    if any("--no-deps" not in argv for argv in project):
        problems.append("the project is installed without --no-deps: pip would resolve beyond the lock")
    return problems


def image_paths(text: str) -> dict[PurePosixPath, Path]:
    """Where the Dockerfile's COPY instructions put repository paths in the image."""
    copies = [a.split() for k, a in instructions(text) if k == "COPY" and "--" not in a]
    return {PurePosixPath(words[-1]): ROOT / words[0] for words in copies if len(words) == 2}
