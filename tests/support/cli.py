"""`tunefleet ...` as a user runs it, in a process of its own: the CLI configures logging for the whole
process it runs in, which must not reach the test's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from service.core.settings import FleetSettings
from tests.support.fleet import settings_env


def tunefleet(
    *args: str,
    env: Mapping[str, str],
    timeout_s: float = 60,
    check: bool = False,
    stderr_file: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tunefleet ARGS` as a real process, to its end: `env` is its whole environment, its stdin is not a
    terminal, its stdout is captured as text, and so is its stderr unless `stderr_file` (appended to) is
    given."""
    with (stderr_file or Path(os.devnull)).open("a") as err:
        return subprocess.run(
            [sys.executable, "-m", "service", *args],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err if stderr_file is not None else subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            check=check,
        )


def fleet_env(settings: FleetSettings, **more: str) -> dict[str, str]:
    """This process's environment, the settings as TUNEFLEET_* variables over it, then `more`."""
    return {**os.environ, **settings_env(settings), **more}
