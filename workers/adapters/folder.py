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
What is read there goes through `read_agent_file`: an agent may have put a link (to a key, a
credential: anything the worker can read and it cannot), a named pipe (a read that never ends) or a
device (`/dev/zero`: one that never stops) where its output should be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from service.core.io.files import FOLDER_FLAGS, NotRegularFile, open_regular, write_atomic
from service.core.io.trees import clear

AGENT_FILE_MAX_BYTES = 64 * 1024 * 1024
"""The most the fleet reads of one file an agent wrote (its records keep less: AGENT_TEXT_MAX_CHARS)."""


class AgentFileRefused(ValueError):
    """A file an agent left that the fleet does not read: a link, not a regular file, or too large."""


def read_agent_file(path: Path, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
    """The bytes of a file an agent wrote; None when there is none. AgentFileRefused, naming the file,
    when it or its folder is a symbolic link (never followed), it is not a regular file, it is larger
    than `max_bytes`, or it cannot be read (service.core.io.files.open_regular: the open never blocks);
    reading stops at `max_bytes`."""
    try:
        folder = os.open(path.parent, FOLDER_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AgentFileRefused(f"{path.parent.name}/ is not a folder (a link is not followed)") from exc
    try:
        opened = open_regular(path.name, dir_fd=folder)
    except NotRegularFile as exc:
        raise AgentFileRefused(str(exc)) from exc
    except OSError as exc:
        raise AgentFileRefused(f"{path.name} cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(folder)
    if opened is None:
        return None
    with opened as file:
        size = os.fstat(file.fileno()).st_size
        if size > max_bytes:
            raise AgentFileRefused(f"{path.name} is {size} bytes, more than the {max_bytes} read")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while being read
        raise AgentFileRefused(f"{path.name} is more than the {max_bytes} bytes read")
    return data


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
        """Make `in/` and `home/` if they are not there and an empty `out/` (a second round must not read
        the first one's). An agent of an earlier round may have put a link or a file in the place of any
        of them: it is removed, so that the fleet never writes inputs or reads outputs through it."""
        clear(self.outputs)
        for folder in (self.inputs, self.home):
            if folder.is_symlink() or not folder.is_dir():
                clear(folder)
        for folder in (self.inputs, self.outputs, self.home):
            folder.mkdir(parents=True, exist_ok=True)

    def give(self, name: str, data: bytes) -> Path:
        """Put the input `name` in `in/`, written anew: whatever an agent of an earlier round left under
        that name (a link to a file of the worker's, say) is replaced, never written through."""
        path = self.inputs / name
        write_atomic(path, data, durable=False)
        return path
