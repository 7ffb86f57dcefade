"""The hashed lock files (requirements/*.lock) read, and checked against pyproject.toml's ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
DEV_LOCK = ROOT / "requirements" / "dev.lock"


def lock_entries(text: str) -> dict[str, tuple[Version, int]]:
    """A hashed lock file's pins: name -> (version, how many hashes)."""
    entries: dict[str, tuple[Version, int]] = {}
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        name, _, version = spec.strip().partition("==")
        hashes = sum(1 for option in options if option.startswith("hash=sha256:"))
        entries[name.lower().replace("_", "-")] = (Version(version), hashes)
    return entries


def lock_problems(lock_text: str, requirements: list[str]) -> list[str]:
    """Every requirement is pinned in the lock at a version within its range, and every pin has hashes."""
    entries = lock_entries(lock_text)
    problems = [f"{name}=={v} has no hash" for name, (v, hashes) in entries.items() if hashes == 0]
    for text in requirements:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        if name not in entries:
            problems.append(f"{requirement.name} is not in the lock")
        elif entries[name][0] not in requirement.specifier:
            pinned = entries[name][0]
            problems.append(f"{requirement.name}: the lock's {pinned} is outside {requirement.specifier}")
    return problems


def bound_problems(requirements: list[str]) -> list[str]:
    """Every runtime dependency has a compatible range: a lower and an upper bound, or an exact pin."""
    problems = []
    for text in requirements:
        specs = Requirement(text).specifier
        operators = {s.operator for s in specs}
        if "==" in operators or "~=" in operators:
            continue
        if not operators & {">=", ">"} or not operators & {"<", "<="}:
            problems.append(f"{text}: needs both a lower and an upper bound")
    return problems


def runtime_requirements() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [str(r) for r in pyproject["project"]["dependencies"]]


def dev_requirements() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return runtime_requirements() + [str(r) for r in pyproject["project"]["optional-dependencies"]["dev"]]
