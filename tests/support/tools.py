"""Markers for tests that drive a tool of the machine (bubblewrap, say)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Skip without `name` on PATH, except under CI=true: there a missing tool fails the test, since a
    silent skip would leave a feature untested."""
    missing = shutil.which(name) is None and os.environ.get("CI") != "true"
    return pytest.mark.skipif(missing, reason=f"{name} is not installed")


def python_agent_paths() -> list[str]:
    """What a sandbox must show a test's Python agent: this interpreter's installation, the virtual
    environment and the tests' agent scripts (read-only)."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sorted({sys.base_prefix, sys.prefix, os.path.join(tests, "agents")})
