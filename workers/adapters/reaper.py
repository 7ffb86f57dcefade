"""The keeper of one agent step: nothing the agent starts outlives the step or the worker.

Run by the worker as `python -I -S reaper.py CONFIG_JSON -- ARGV...` (standard library only, so it
starts in a few milliseconds and needs nothing installed). It

- becomes a *child subreaper*: every process the agent starts, even one that leaves with `setsid`
  and a double fork, stays its descendant and can be found and ended;
- asks the kernel to send it SIGTERM when the worker dies (`PR_SET_PDEATHSIG`), even by SIGKILL;
- puts the agent into per-step cgroups, when the worker's settings name cgroup folders, with the
  processes and memory limits, and sets the resource limits (`setrlimit`) before the agent starts;
- without a sandbox tool, when the worker's settings ask for it (a root worker): gives the agent a
  mount namespace where the store is an empty folder but for the step's own folders, a PID namespace
  with a `/proc` of its own (`hidepid=2` besides), and a network namespace of its own (nothing but a
  loopback that is down) unless the tuning opened the network;
- runs the agent as another user (`uid`), with no supplementary groups, when the worker is root;
- hands bubblewrap the agent's environment through a file descriptor (`--args FD` where argv says
  `env_args`), so that bubblewrap can clear its own and no value ever shows on a command line;
- when the agent ends, or on SIGTERM: TERM to every descendant, `grace_s` for them to go, then KILL
  until none is left; then the optional `cleanup` command (`docker rm -f NAME`), then it exits with
  the agent's exit code (128 + N when a signal N ended it; 127 when it could not start).

An agent that cannot be started is reported as one log line `tunefleet: cannot start ARGV0: WHY`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:  # the keeper imports no more than it needs: typing costs it milliseconds
    from typing import Any

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
AT_FDCWD = -100
OPEN_TREE_CLONE, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 0x1, 0x8000, 0x4
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429
"""The same numbers on x86_64 and arm64 (syscalls added since Linux 5.0 share one table)."""
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.02
START_FAILED_EXIT = 127
START_FAILED_PREFIX = "tunefleet: cannot start "
CLEANUP_TIMEOUT_S = 30.0
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _libc_call(name: str, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(getattr(libc, name)(*args))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")
    return result


def _bytes(value: str | None) -> bytes | None:
    return value.encode() if value is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _libc_call("mount", _bytes(source), target.encode(), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data))


def _syscall(number: int, *args: int | bytes) -> int:
    return _libc_call(
        "syscall", ctypes.c_long(number), *(a if isinstance(a, bytes) else ctypes.c_long(a) for a in args)
    )


def _isolate(spaces: dict[str, Any]) -> None:
    """As root, before the agent starts: its own mount namespace (the store hidden but for the step's
    folders), its own PID namespace (for the children of this process) and, unless the network is open,
    its own network namespace."""
    network = 0 if spaces.get("network") else CLONE_NEWNET
    _libc_call("unshare", CLONE_NEWNS | CLONE_NEWPID | network)
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # Parents first; each shown folder is cloned before the store is covered, then put back in place.
    shown = sorted(((str(p), bool(w)) for p, w in spaces.get("show", [])), key=lambda s: s[0].count("/"))
    clones = [
        (path, writable, _syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE | AT_RECURSIVE))
        for path, writable in shown
    ]
    for hidden in spaces.get("hide", []):
        _mount("tmpfs", str(hidden), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path, writable, fd in clones:
        os.makedirs(path, exist_ok=True)
        _syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, path.encode(), MOVE_MOUNT_F_EMPTY_PATH)
        os.close(fd)
        if not writable:
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def _exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)


def _init_of(agent: int) -> int:
    """PID 1 of the agent's namespace: reap whatever ends until the agent does; its exit code. When this
    returns, the kernel kills whatever the agent left in the namespace."""
    while True:
        pid, status = os.wait()
        if pid == agent:
            return _exit_code(status)


def _enter_namespaces(spaces: dict[str, Any], error_w: int) -> None:
    """Isolate, then fork twice: this process waits for the namespace's PID 1, which mounts the
    namespace's own /proc (hidepid: other users' processes are not even listed) and waits for the agent;
    only the agent returns from here."""
    _isolate(spaces)
    init = os.fork()
    if init:
        os.close(error_w)
        os._exit(_exit_code(os.waitpid(init, 0)[1]))
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    agent = os.fork()
    if agent:
        os.close(error_w)
        os._exit(_init_of(agent))


def _become(uid: int) -> None:
    """Become the agent's user (its group too), with no supplementary groups."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _env_args_fd() -> int:
    """A file descriptor holding `--setenv NAME VALUE` for every variable of this process, for bwrap."""
    fd = os.memfd_create("agent-env", 0)
    payload = b"".join(b"--setenv\0%s\0%s\0" % (k.encode(), v.encode()) for k, v in os.environ.items())
    os.write(fd, payload)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _descendants(root: int) -> list[int]:
    """Every live (not zombie) descendant of `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in ("Z", "X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cgroup_members(groups: list[Path]) -> list[int]:
    members: list[int] = []
    for group in groups:
        with contextlib.suppress(OSError, ValueError):
            members += [int(line) for line in (group / "cgroup.procs").read_text().split()]
    return members


def _reap(ended: dict[int, int]) -> None:
    """Collect every child that has ended (orphans reparented to us included) into `ended`."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended[pid] = status


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _end_everything(groups: list[Path], grace_s: float, ended: dict[int, int]) -> None:
    """TERM every descendant, wait up to `grace_s` for them to exit, then KILL until none is left."""
    me = os.getpid()
    _signal_all(_descendants(me) + _cgroup_members(groups), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(ended)
        if not _descendants(me) and not _cgroup_members(groups):
            return
        time.sleep(POLL_S)
    while True:  # a fork bomb cannot outrun this: a killed process forks no more
        left = _descendants(me) + _cgroup_members(groups)
        if not left:
            return
        _signal_all(left, signal.SIGKILL)
        time.sleep(POLL_S)
        _reap(ended)


def _make_groups(dirs: list[str], name: str, limits: dict[str, int]) -> list[Path]:
    """One cgroup per folder for this step, with the limits that folder's controllers know."""
    groups: list[Path] = []
    for parent in dirs:
        group = Path(parent) / name
        group.mkdir(parents=True, exist_ok=True)
        groups.append(group)
        files = {
            "pids.max": limits.get("processes"),
            "memory.max": limits.get("memory_bytes"),  # cgroup v2
            "memory.limit_in_bytes": limits.get("memory_bytes"),  # cgroup v1
            "memory.swap.max": 0 if limits.get("memory_bytes") else None,
        }
        for file, value in files.items():
            if value is not None and (group / file).exists():
                with contextlib.suppress(OSError):
                    (group / file).write_text(str(value))
    return groups


def _remove_groups(groups: list[Path]) -> None:
    for group in groups:
        with contextlib.suppress(OSError):
            group.rmdir()


def _child(argv: list[str], groups: list[Path], config: dict[str, Any], error_w: int) -> None:
    """In the forked child: join the cgroups, set the limits, isolate, drop to the agent's user, become
    the agent (never returns)."""
    try:
        for group in groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        for name, value in config.get("rlimits", {}).items():
            resource.setrlimit(RLIMITS[name], (value, value))
        if config.get("namespaces"):
            _enter_namespaces(config["namespaces"], error_w)
        token = config.get("env_args")
        if token in argv:
            argv = [str(_env_args_fd()) if arg == token else arg for arg in argv]
        if config.get("uid") is not None:
            _become(int(config["uid"]))
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(error_w, (exc.strerror or str(exc)).encode())
    finally:
        os._exit(START_FAILED_EXIT)


def main(raw_config: str, argv: list[str]) -> int:
    config = json.loads(raw_config)
    grace_s = float(config.get("grace_s", 5.0))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the worker died before the line above: nothing to run for
        return START_FAILED_EXIT
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCHLD})
    groups = _make_groups(
        config.get("cgroup_dirs", []),
        config.get("name", f"step-{os.getpid()}"),
        config.get("cgroup_limits", {}),
    )
    error_r, error_w = os.pipe2(os.O_CLOEXEC)
    leader = os.fork()
    if leader == 0:
        os.close(error_r)
        _child(argv, groups, config, error_w)
    os.close(error_w)
    with os.fdopen(error_r, "rb") as errors:
        start_error = errors.read().decode(errors="replace")
    ended: dict[int, int] = {}
    if start_error:
        print(f"{START_FAILED_PREFIX}{argv[0]}: {start_error}", flush=True)
    while leader not in ended and not start_error:
        if signal.sigwaitinfo({signal.SIGTERM, signal.SIGCHLD}).si_signo == signal.SIGTERM:
            break
        _reap(ended)
    _end_everything(groups, grace_s, ended)
    if leader not in ended:
        with contextlib.suppress(ChildProcessError):
            ended[leader] = os.waitpid(leader, 0)[1]
    status = ended.get(leader)
    _remove_groups(groups)
    cleanup = config.get("cleanup")
    if cleanup:
        import subprocess  # only for a container to remove: it costs the keeper's start 10 ms

        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                cleanup,
                timeout=CLEANUP_TIMEOUT_S,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
    if start_error or status is None:
        return START_FAILED_EXIT if start_error else 128 + signal.SIGTERM
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    separator = sys.argv.index("--")
    sys.exit(main(sys.argv[1], sys.argv[separator + 1 :]))
