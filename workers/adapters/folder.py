"""The layout of an agent process's step folder: what it is given, where it writes, where it lives.

    <step_dir>/                 run-<lease>/, analyze-<lease>/ or apply-<lease>/ in the attempt folder
        in/                     the role's inputs, written by the fleet, read-only to the agent
        out/                    the one folder the fleet reads the agent's result from
        home/                   the agent's HOME
        workspace/ memory/      the runner's (kept: the analyzer grades them)
        system/                 the analyzer's private copy of the run's version, or the applier's
                                copy of the current version, which the fleet commits
        <step>.log              the agent's stdout and stderr, written by the worker

The step makes the folder fresh for its lease; nothing an agent leaves anywhere else is ever read.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StepFolder:
    root: Path

    @property
    def inputs(self) -> Path:
        return self.root / "in"

    @property
    def outputs(self) -> Path:
        return self.root / "out"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @classmethod
    def ready(cls, root: Path) -> StepFolder:
        """The step folder `root`, prepared for the step's round (`prepare`)."""
        folder = cls(root)
        folder.prepare()
        return folder

    def prepare(self) -> None:
        """Make `in/`, `home/` and an empty `out/` (a second round must not read the first one's)."""
        shutil.rmtree(self.outputs, ignore_errors=True)
        for folder in (self.inputs, self.outputs, self.home):
            folder.mkdir(parents=True, exist_ok=True)
