"""Run one agent process: argv (never a shell), under its keeper, with a timeout and clean cancellation.

Every agent runs under its step's keeper (`workers/adapters/reaper.py`), a small process of its
own session that holds every process the agent starts (a subreaper: even one that leaves with
`setsid`), sets the step's limits and cgroups, and ends them all when the agent ends, when the
worker ends the step, or when the worker dies. The child's stdout and stderr go straight to the
log file, opened for appending, so a line reaches the log as soon as the child writes it and a
straggler holding the file open can never block us. Whatever way the step ends (exit, timeout,
cancellation), the keeper's group is signalled: TERM, then KILL once the keeper has had `grace_s`
plus a margin to end what the agent started.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from service.core.io.files import NotRegularFile, open_regular
from service.core.io.trees import clear
from service.core.settings import FleetSettings
from workers.adapters.isolation import RootPowers, lend, take_back
from workers.adapters.reaper import START_FAILED_EXIT, START_FAILED_PREFIX

log = structlog.get_logger()

TAIL_BYTES = 4096
"""How much of the end of the log is read: for the process's last line, and its tail."""
TAIL_LINES = 40
"""At most this many lines of the log's end are kept as its tail."""
GROUP_POLL_S = 0.05
"""How often a terminating group is checked for processes still running."""
PROC_DIR = Path("/proc")
START_ATTEMPTS = 4
KEEPER = Path(__file__).with_name("reaper.py")
KEEPER_MARGIN_S = 2.0
"""How much longer than `grace_s` the keeper gets to end the agent's processes before it is killed."""


@dataclass(frozen=True)
class AgentHost:
    """What the worker's machine gives every agent process: the TERM-to-KILL grace, the cgroup folders
    (from the worker's settings) in which each step gets a group of its own, the user agents run as
    (None: the worker's own) and the folders hidden from an agent that has no sandbox (the store)."""

    grace_s: float = 10.0
    cgroup_dirs: Sequence[Path] = ()
    agent_uid: int | None = None
    hidden: Sequence[Path] = ()
    powers: RootPowers = field(default_factory=RootPowers)

    @classmethod
    def of_worker(cls, settings: FleetSettings) -> AgentHost:
        """The host of a worker with these settings: agents run as `agent_uid` where this process is root
        and may switch users, and the store is hidden from an unsandboxed agent where it may."""
        powers = RootPowers.of_this_process()
        if settings.agent_uid == 0:  # root agents: another user's namespaces would hide nothing from them
            powers = RootPowers()
        return cls(
            grace_s=settings.stop_grace_s,
            cgroup_dirs=tuple(settings.cgroup_dirs),
            agent_uid=settings.agent_uid if powers.switch_user else None,
            hidden=(settings.store.absolute(),),
            powers=powers,
        )


@dataclass(frozen=True)
class Containment:
    """How the keeper holds a step: its name (cgroups, container), its resource limits (`setrlimit`
    names: as, nproc, fsize, nofile), the cgroup folders to make a group in and that group's limits
    (memory_bytes, processes), and a command that removes what the step left (a container)."""

    name: str = "step"
    rlimits: Mapping[str, int] = field(default_factory=dict)
    cgroup_dirs: Sequence[Path] = ()
    cgroup_limits: Mapping[str, int] = field(default_factory=dict)
    cleanup: Sequence[str] = ()
    uid: int | None = None
    namespaces: Mapping[str, object] | None = None
    env_args: str | None = None
    lent: Sequence[Path] = ()
    lent_to: int | None = None
    """The folders the step writes, given to `lent_to` (the agent's user) for the step and taken back
    when it ends; None: they stay the worker's."""


@dataclass(frozen=True)
class ProcessSpec:
    """What to run and how long to let it run; `env` is the process's whole environment."""

    argv: Sequence[str]
    log_file: Path
    timeout_s: float
    grace_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    containment: Containment = field(default_factory=Containment)

    def kept_argv(self) -> list[str]:
        """The argv under the step's keeper."""
        config = {
            "grace_s": self.grace_s,
            "name": self.containment.name,
            "rlimits": dict(self.containment.rlimits),
            "cgroup_dirs": [str(p) for p in self.containment.cgroup_dirs],
            "cgroup_limits": dict(self.containment.cgroup_limits),
            "cleanup": list(self.containment.cleanup),
            "uid": self.containment.uid,
            "namespaces": self.containment.namespaces,
            "env_args": self.containment.env_args,
        }
        return [sys.executable, "-I", "-S", str(KEEPER), json.dumps(config), "--", *self.argv]


@dataclass(frozen=True)
class ProcessResult:
    """How the process ended; `exit_code` is negative for a signal (-9: SIGKILL)."""

    exit_code: int
    duration_ms: int
    timed_out: bool = False
    start_error: str | None = None
    last_line: str = ""
    tail: str = ""
    """The last lines the process wrote to the log (at most TAIL_BYTES and TAIL_LINES)."""


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_running(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie waiting for its reaper does not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not PROC_DIR.is_dir():
        return True
    for stat_file in PROC_DIR.glob("[0-9]*/stat"):
        try:
            state, _ppid, pgrp = stat_file.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if pgrp == str(pgid) and state not in ("Z", "X"):
            return True
    return False


async def _end_group(pgid: int, waiter: asyncio.Future[int], grace_s: float) -> None:
    """TERM the group, give it up to `grace_s` to exit (leader and children), then KILL what is left."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        await asyncio.wait({waiter}, timeout=grace_s)
        # No event tells when a process group empties: poll, bounded by the deadline.
        while _group_running(pgid) and time.monotonic() < deadline:
            await asyncio.sleep(GROUP_POLL_S)
    finally:
        # Always reached, even if this wait is itself cancelled: stragglers get no second chance.
        _signal_group(pgid, signal.SIGKILL)
    await asyncio.wait({waiter})


def _log_tail(log_file: Path, start_offset: int) -> list[str]:
    """The last whole lines the process wrote to the log (bytes before `start_offset` are not its), at
    most TAIL_BYTES and TAIL_LINES of them."""
    try:  # the agent may have put a link, a pipe or a device in the log's place: never followed or read
        opened = open_regular(log_file)
    except (OSError, NotRegularFile):
        return []
    if opened is None:
        return []
    with opened as handle:
        size = handle.seek(0, os.SEEK_END)
        begin = max(start_offset, size - TAIL_BYTES)
        handle.seek(begin)
        tail = handle.read(TAIL_BYTES)
    lines = tail.decode("utf-8", errors="replace").splitlines()
    if begin > start_offset and len(lines) > 1:
        lines = lines[1:]  # the first begins inside a line
    return lines[-TAIL_LINES:]


def _last_line(lines: list[str]) -> str:
    """The last non-empty line of a log's tail."""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


TRANSIENT_START_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_START_ERRNOS


async def _start(spec: ProcessSpec, log_handle: BinaryIO) -> asyncio.subprocess.Process:
    """Start the agent; a fork that fails for want of resources (EAGAIN, ENOMEM, too many files) is
    tried again with backoff, a missing program is not."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(START_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    ):
        with attempt:
            return await asyncio.create_subprocess_exec(
                *spec.kept_argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_handle,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(spec.env),
                cwd=spec.cwd,
                start_new_session=True,
            )
    raise AssertionError("unreachable")


async def run_process(spec: ProcessSpec) -> ProcessResult:
    """Run `spec.argv` to its end, its timeout, or the caller's cancellation (which is re-raised)."""
    spec.log_file.parent.mkdir(parents=True, exist_ok=True)
    lent_to = spec.containment.lent_to
    lent = spec.containment.lent if lent_to is not None else ()
    if lent_to is not None and lent:
        await asyncio.to_thread(lend, lent, lent_to)
    try:
        return await _run(spec)
    finally:
        if lent:  # every process of the step is gone by now: the folders are the worker's again
            await asyncio.shield(asyncio.to_thread(take_back, lent))


LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_log(log_file: Path) -> BinaryIO:
    """The step's log, for appending the agent's output to it: always a regular file of the worker's. An
    agent of an earlier round may have put something else in its place (a link to a file of the
    worker's, which its output would then be appended to; a named pipe, which would never open): that is
    removed and a new log begun."""
    try:
        fd = os.open(log_file, LOG_FLAGS, 0o644)
    except OSError:  # a link (not followed), a pipe with no reader, a folder
        fd = -1
    if fd >= 0 and not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        fd = -1
    if fd < 0:
        clear(log_file)
        fd = os.open(log_file, LOG_FLAGS | os.O_EXCL, 0o644)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


async def _run(spec: ProcessSpec) -> ProcessResult:
    started = time.monotonic()
    with _open_log(spec.log_file) as log_handle:
        start_offset = log_handle.tell()
        try:
            proc = await _start(spec, log_handle)
        except OSError as exc:
            error = f"cannot start {spec.argv[0]}: {exc.strerror or exc}"
            log_handle.write(f"tunefleet: {error}\n".encode())
            log.warning("agent_process_start_failed", argv0=spec.argv[0], error=error)
            return ProcessResult(
                exit_code=127,
                duration_ms=_elapsed_ms(started),
                start_error=error,
                last_line=f"tunefleet: {error}",
                tail=f"tunefleet: {error}",
            )
    log.info(
        "agent_process_started",
        pid=proc.pid,
        argv=list(spec.argv),
        cwd=str(spec.cwd) if spec.cwd else None,
        env_keys=sorted(spec.env),
        timeout_s=spec.timeout_s,
    )
    waiter: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=spec.timeout_s)
    except asyncio.CancelledError:
        log.info("agent_process_cancelled", pid=proc.pid, grace_s=spec.grace_s)
        await _end_group(proc.pid, waiter, spec.grace_s + KEEPER_MARGIN_S)
        raise
    timed_out = not done
    if timed_out:
        log.warning("agent_process_timed_out", pid=proc.pid, timeout_s=spec.timeout_s)
    duration_ms = _elapsed_ms(started)
    # Also after a normal exit: whatever the leader left running in its group goes with it.
    await _end_group(proc.pid, waiter, spec.grace_s + KEEPER_MARGIN_S)
    exit_code = waiter.result()
    tail = _log_tail(spec.log_file, start_offset)
    last_line = _last_line(tail)
    log.info("agent_process_ended", pid=proc.pid, exit_code=exit_code, duration_ms=duration_ms)
    start_error = None
    if exit_code == START_FAILED_EXIT and last_line.startswith(START_FAILED_PREFIX):
        start_error = last_line.removeprefix("tunefleet: ")
    return ProcessResult(
        exit_code=exit_code,
        duration_ms=duration_ms,
        timed_out=timed_out,
        start_error=start_error,
        last_line=last_line,
        tail="\n".join(tail),
    )
