"""The tests' own rules about the machine's tools (issue 12, item 17): a missing tool is a listed skip, a
failure under CI=true; tools are found on PATH; no test installs anything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = '''
import subprocess

from tests.support.tools import needs_module, needs_tool, require_tool


@needs_tool("no-such-tool-5e1f")
def test_marked() -> None:
    """Needs a tool that no machine has, and runs it."""
    subprocess.run(["no-such-tool-5e1f"], check=True)


def test_fixture_side() -> None:
    """Needs it from inside, as a fixture would."""
    require_tool("no-such-tool-5e1f")


@needs_module("no_such_module_5e1f")
def test_module() -> None:
    """Needs a Python package that no machine has."""
    import no_such_module_5e1f  # noqa: F401
'''


def run_probe(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            str(probe),
        ],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_tool_is_a_listed_skip_and_a_failure_under_ci(tmp_path: Path) -> None:
    """Without CI, tests needing a missing tool or package are skipped and listed with the reason (-rs);
    under CI=true each of them fails."""
    local = run_probe(tmp_path, ci=False)
    assert re.search(r"\b3 skipped\b", local.stdout), local.stdout
    assert local.stdout.count("SKIPPED") == 3 and "no-such-tool-5e1f is not installed" in local.stdout
    ci = run_probe(tmp_path, ci=True)
    assert re.search(r"\b3 failed\b", ci.stdout), ci.stdout


def test_pytest_lists_skips() -> None:
    """The project's pytest options include -rs, so that no skip goes unseen."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-rs" in options["addopts"].split()


def test_chromium_is_found_wherever_path_finds_it(tmp_path: Path) -> None:
    """The browser tests use the `chromium` that PATH finds first, wherever it is installed."""
    fake = tmp_path / "bin" / "chromium"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    shown = subprocess.run(
        [sys.executable, "-c", "from tests.test_dashboard_browser import CHROMIUM; print(CHROMIUM)"],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout.strip() == str(fake)


def test_no_test_runs_a_package_manager() -> None:
    """No test starts apt-get (or another package manager): `make test`'s bootstrap installs the tools."""
    started = re.compile(r"""["'](apt-get|apt|dpkg|pip)["']\s*,|\[\s*["'](sudo|apt-get|apt)["']""")
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name not in {"test_tools.py", "test_deploy_files.py"} and started.search(path.read_text())
    ]
    assert offenders == []
