"""Running git: every command in its own process group, under a timeout, its failures our errors.

Past its timeout a command's group is ended (TERM, so git removes its lock files, then KILL) and
SystemRepoError names the command and the seconds. A git that fails, cannot be started or times
out is always a SystemRepoError, never an answer; credentials in URLs never reach a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from service.core.errors import SystemRepoError

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tunefleet",
    "GIT_AUTHOR_EMAIL": "tunefleet@localhost",
    "GIT_COMMITTER_NAME": "tunefleet",
    "GIT_COMMITTER_EMAIL": "tunefleet@localhost",
}
LOCATING_ENV = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
    }
)
"""Inherited variables that would point git at another repository than the one a command names."""
DEFAULT_GIT_TIMEOUT_S = 60.0
GIT_TERM_GRACE_S = 2.0
"""How long a timed-out git's process group has after TERM before it is KILLed."""
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def mask_credentials(text: str) -> str:
    """`text` with the user and password of every URL in it replaced by `***`."""
    return _USERINFO.sub("***@", text)


@dataclass(frozen=True)
class GitResult:
    """How one git command ended: its exit code (one the caller accepted) and its stdout."""

    exit: int
    out: bytes


def _environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LOCATING_ENV}
    return {**env, **GIT_IDENTITY, "GIT_TERMINAL_PROMPT": "0", **(extra or {})}


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def _end_group(proc: asyncio.subprocess.Process) -> None:
    """TERM git's process group (git removes its lock files on TERM), KILL it after the grace."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GIT_TERM_GRACE_S):
                await proc.wait()
    finally:
        _signal_group(proc.pid, signal.SIGKILL)  # also when this wait is itself cancelled


async def _start(
    args: tuple[str, ...], command: str, cwd: Path | None, stdin: bytes | None, env: dict[str, str]
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if cwd is not None and not cwd.is_dir():
            raise SystemRepoError(f"{command}: folder {cwd} does not exist") from exc
        raise SystemRepoError(
            f"git is not installed or not on PATH: cannot run {command} ({exc.strerror})"
        ) from exc
    except OSError as exc:
        raise SystemRepoError(f"git could not be started: cannot run {command} ({exc})") from exc


async def run_git(
    *args: str,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_GIT_TIMEOUT_S,
    ok_exits: Collection[int] = (0,),
) -> GitResult:
    """Run one git command (`env` adds to the environment); its exit code when it is one of `ok_exits`,
    else SystemRepoError with the command, the exit code and git's stderr."""
    command = mask_credentials(f"git {' '.join(args)}")
    proc = await _start(args, command, cwd, stdin, _environment(env))
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate(stdin)
    except TimeoutError:
        raise SystemRepoError(f"{command}: no answer within {timeout_s:g} s: killed") from None
    finally:
        if proc.returncode is None:
            await _end_group(proc)
    code = proc.returncode
    assert code is not None
    if code not in ok_exits:
        stderr = mask_credentials(err.decode(errors="replace").strip())
        raise SystemRepoError(f"{command}: exit {code}: {stderr}")
    return GitResult(exit=code, out=out)


async def git(
    *args: str,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_GIT_TIMEOUT_S,
) -> bytes:
    """Run one git command; its stdout, or SystemRepoError (any exit but 0, a timeout, no git)."""
    return (await run_git(*args, cwd=cwd, stdin=stdin, env=env, timeout_s=timeout_s)).out
