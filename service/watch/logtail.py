"""The tail of one step's agent log, found in the store.

A step works in `<attempt>/<step>-<token>/` and its agent's stdout and stderr go to
`<step>.log` there. A step run again (after a lost lease) gets a folder with a newer token, so
the newest folder is the one under way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, Field

from service.core.io.files import NotRegularFile, open_regular
from service.core.store import Store
from service.watch.snapshot import RunningStep

TAIL_BYTES = 256 * 1024
"""How much of the end of a log the follow view reads at most."""

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class LogTail(BaseModel):
    """The last lines of a step's log (an empty list when there is no log yet)."""

    path: Path | None = None
    lines: list[str] = Field(default_factory=list)
    size_bytes: int = 0


def attempt_folder(store: Store, step: RunningStep) -> Path:
    return store.tuning(step.tuning).case(step.case, step.rev).attempt(step.phase, step.attempt).root


def _token_of(folder: Path) -> int:
    suffix = folder.name.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def find_step_log(store: Store, step: RunningStep) -> Path | None:
    """The log of the step's folder the worker named, else of the newest `<step>-*` folder."""
    attempt = attempt_folder(store, step)
    if step.work is not None:
        named = attempt / step.work / f"{step.step}.log"
        if named.parent.is_dir():
            return named
    try:
        folders = [p for p in attempt.glob(f"{step.step}-*") if p.is_dir()]
    except OSError:
        return None
    if not folders:
        return None
    newest = max(folders, key=lambda p: (_token_of(p), p.stat().st_mtime_ns))
    return newest / f"{step.step}.log"


def clean_line(line: str) -> str:
    """A log line fit for the terminal: escape sequences and control characters removed, tabs expanded."""
    return _CONTROL_RE.sub("", _ANSI_RE.sub("", line.rstrip("\r"))).expandtabs(4)


def read_tail(path: Path | None, max_lines: int, max_bytes: int = TAIL_BYTES) -> LogTail:
    """The last `max_lines` lines of the file (at most `max_bytes` read from its end)."""
    if path is None or max_lines <= 0:
        return LogTail(path=path)
    try:  # an agent may have put a link, a pipe or a device in its log's place: never followed or read
        opened = open_regular(path)
        if opened is None:
            return LogTail(path=path)
        with opened as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(size - start)
    except (OSError, NotRegularFile):
        return LogTail(path=path)
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if start > 0:
        lines = lines[1:]  # the first line read is a part of one
    if lines and lines[-1] == "":
        lines.pop()
    return LogTail(path=path, lines=[clean_line(x) for x in lines[-max_lines:]], size_bytes=size)
