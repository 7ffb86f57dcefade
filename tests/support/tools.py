"""Markers for tests that drive a tool of the machine (bubblewrap, say)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Skip without `name` on PATH, except under CI=true: there a missing tool fails the test, since a
    silent skip would leave a feature untested."""
    missing = shutil.which(name) is None and os.environ.get("CI") != "true"
    return pytest.mark.skipif(missing, reason=f"{name} is not installed")


def require_tool(name: str) -> str:
    """The path of `name` on PATH; a skip without it (as `needs_tool`), a failure under CI=true. For
    fixtures, which marks cannot reach. Never installs anything: `make test`'s bootstrap does."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed (CI=true: a missing tool fails the test)")
        pytest.skip(f"{name} is not installed (make setup-test installs it)")
    return found


def needs_module(name: str) -> pytest.MarkDecorator:
    """Skip without the Python package `name`, except under CI=true (the test then fails on import)."""
    missing = importlib.util.find_spec(name) is None and os.environ.get("CI") != "true"
    return pytest.mark.skipif(missing, reason=f"needs the {name} Python package")


def python_agent_paths() -> list[str]:
    """What a sandbox must show a test's Python agent: this interpreter's installation, the virtual
    environment and the tests' agent scripts (read-only)."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sorted({sys.base_prefix, sys.prefix, os.path.join(tests, "agents")})
