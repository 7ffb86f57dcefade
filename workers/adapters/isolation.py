"""What each agent receives of its worker: its environment, its user, and what stays open without a sandbox.

- **Environment**: a small base (PATH, the locale, TZ, TERM; HOME is the step's own folder) plus the
  variables its adapter lists in `env`, never the rest of the worker's environment.
- **User**: where the worker runs as root, every agent runs as `agent_uid` (65534, nobody, by default),
  whatever the sandbox: the folders the step writes are lent to that user for the step and taken back
  when it ends, before the worker reads them.
- **Without a sandbox** (`kind: none`), a worker that runs as root and holds the powers for it also
  gives the agent a mount namespace where the store is hidden but for its own step's folders and a
  `/proc` that shows only the agent's processes (hidepid), and a network namespace of its own unless
  `network: true`. `open_without_sandbox()` names what stays open, for the startup warning.

docs/adapters.md ("What each agent receives") has the table.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

BASE_NAMES = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TERM")
"""Variables every agent gets from the worker's environment when it has them: none holds a secret."""
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
NOBODY_UID = 65534
CAP_CHOWN, CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN = 0, 6, 7, 21


def agent_environment(
    allowed: Mapping[str, str | None], home: Path | None, worker_env: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of an agent: the base, HOME, then each `allowed` name with its set value or,
    for None, the worker's value (left out when the worker has none)."""
    env = {name: worker_env[name] for name in BASE_NAMES if name in worker_env}
    env.setdefault("PATH", DEFAULT_PATH)
    if home is not None:
        env["HOME"] = str(home)
    for name, value in allowed.items():
        if value is not None:
            env[name] = value
        elif name in worker_env:
            env[name] = worker_env[name]
    return env


def _effective_caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


@dataclass(frozen=True)
class RootPowers:
    """What the worker's own privileges let it do to an agent: run it as another user (root with
    CAP_SETUID, CAP_SETGID and CAP_CHOWN) and give it namespaces of its own without a sandbox tool
    (CAP_SYS_ADMIN as well)."""

    switch_user: bool = False
    namespaces: bool = False

    @classmethod
    def of_this_process(cls) -> RootPowers:
        if os.geteuid() != 0:
            return cls()
        caps = _effective_caps()
        has = [bool(caps >> bit & 1) for bit in (CAP_CHOWN, CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN)]
        switch = all(has[:3])
        return cls(switch_user=switch, namespaces=switch and has[3])


def open_without_sandbox(powers: RootPowers, network: bool) -> list[str]:
    """What an agent run with `sandbox: none` can still reach, in words, for the startup warning."""
    if not powers.switch_user:
        return [
            "the agent runs as the worker's own user: it can read and write everything the worker can, "
            "the whole store (every tuning) included",
            "it can read the worker's /proc/<pid>/environ and its settings file: the Redis password and "
            "any key in the worker's environment",
            "it shares the worker's network: Redis and the daemon's API are reachable",
        ]
    open_parts = [
        "every file of the host that other users may read (the store excepted when namespaces are allowed)"
    ]
    if not powers.namespaces:
        open_parts[0] = "every file of the host that other users may read, the store included"
        open_parts.append(
            "it shares the worker's network and sees every process in /proc (not their environments)"
        )
    elif network:
        open_parts.append(
            "it shares the worker's network (network: true): Redis and the API refuse it only "
            "for want of credentials"
        )
    return open_parts


def lend(folders: Iterable[Path], uid: int) -> None:
    """Give the step's writable folders (and what is in them) to the agent's user for the step."""
    _chown_trees(folders, uid)


def take_back(folders: Iterable[Path]) -> None:
    """Give the folders back to the worker's user once the step's processes are all gone."""
    _chown_trees(folders, os.geteuid(), os.getegid())


def _chown_trees(folders: Iterable[Path], uid: int, gid: int | None = None) -> None:
    group = uid if gid is None else gid
    for folder in folders:
        if not folder.is_dir():
            continue
        os.chown(folder, uid, group, follow_symlinks=False)
        for parent, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                with contextlib.suppress(FileNotFoundError):
                    os.chown(os.path.join(parent, name), uid, group, follow_symlinks=False)
