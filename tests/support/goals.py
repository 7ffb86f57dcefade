"""Goals for the tests: specs on disk, started through the real client, read back from the store."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import yaml

from service.core import keys
from service.core.store import Store
from service.kinds.goals.fleet import GoalFiles
from service.kinds.goals.models import FINAL_STATUSES
from service.kinds.goals.state import GoalState, GoalSummary
from service.kinds.goals.store import LOCK_FILE
from tests.support.cli import tunefleet
from tests.support.fleet import Fleet, settings_env, wait_until


def goal_cli(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    """`tunefleet goal ARGS...` as a user runs it, against the fleet's settings (200 columns wide)."""
    env = {**settings_env(fleet.settings), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return tunefleet("goal", *args, env=env)


def write_goal(root: Path, goal_id: str = "g1", **fields: Any) -> Path:
    """A goal spec file below `root` (demo agents unless `runner`/`analyzer` are given)."""
    root.mkdir(parents=True, exist_ok=True)
    body = {"id": goal_id, "goal": f"Finish {goal_id}", "acceptance": ["every task is done"], **fields}
    path = root / f"{goal_id}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


async def start_goal(fleet: Fleet, spec: Path, tuning: str | None = None) -> str:
    async with fleet.client() as client:
        return (await client.goals.start_file(spec, tuning)).id


def goal_state(fleet: Fleet, goal_id: str = "g1") -> GoalState | None:
    return GoalFiles(Store(fleet.settings.store)).state(goal_id)


async def wait_goal_ended(fleet: Fleet, goal_id: str = "g1", timeout_s: float = 60.0) -> GoalState:
    """Wait until the goal's state is final; the state."""

    def ended() -> bool:  # the trace is written last
        state = goal_state(fleet, goal_id)
        if state is None or state.status not in FINAL_STATUSES:
            return False
        return any(e["kind"] == f"goal_{state.status}" for e in trace(fleet, goal_id))

    await wait_until(ended, timeout_s, f"goal {goal_id} to end")
    state = goal_state(fleet, goal_id)
    assert state is not None
    return state


async def wait_goal_shown_ended(fleet: Fleet, goal_id: str = "g1", timeout_s: float = 10.0) -> None:
    """Wait until the goal's summary in Redis (what the API and `goal status` list) is final too: the
    worker writes it just after the state, so on a loaded machine a read may fall between the two."""

    def shown() -> bool:
        with redis.Redis.from_url(fleet.settings.redis_url) as r:
            raw = r.hget(keys.goals(), goal_id)
        return raw is not None and GoalSummary.model_validate_json(raw).status in FINAL_STATUSES

    await wait_until(shown, timeout_s, f"goal {goal_id}'s summary to show it ended")


def goal_dir(fleet: Fleet, goal_id: str = "g1") -> Path:
    return fleet.settings.store / "goals" / goal_id


def trace(fleet: Fleet, goal_id: str = "g1") -> list[dict[str, Any]]:
    path = goal_dir(fleet, goal_id) / "GOAL_TRACE.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def agent_starts(fleet: Fleet, goal_id: str = "g1") -> dict[tuple[int, str], int]:
    """How often each (iteration, step) agent was started: every start makes a fresh step folder
    (`<step>-<lease>`, and `.void-N` when set aside)."""
    counts: dict[tuple[int, str], int] = {}
    for folder in sorted((goal_dir(fleet, goal_id) / "iterations").glob("*/*-*")):
        if not folder.is_dir():
            continue
        step = folder.name.split("-", 1)[0]
        key = (int(folder.parent.name), step)
        counts[key] = counts.get(key, 0) + 1
    return counts


HOLD_AND_FREEZE = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@contextmanager
def frozen_lock_holder(lock_file: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that waits for the flock on `lock_file`, takes it and freezes itself (SIGSTOP) holding it,
    as a worker stopped while it wrote a goal's state would; killed on the way out, which lets go of it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_FREEZE, str(lock_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def freeze_outside_goal_lock(worker: subprocess.Popen[bytes], fleet: Fleet, goal_id: str = "g1") -> None:
    """SIGSTOP `worker` at a moment it does not hold the goal's lock: it holds it for one read and one
    write of the state, and frozen inside it would keep every other writer out (a `cancel` would wait,
    then fail with GoalBusyError). Thawed and frozen again until a probe takes the lock at once."""
    lock_file = goal_dir(fleet, goal_id) / LOCK_FILE
    while True:
        worker.send_signal(signal.SIGSTOP)
        while _state(worker.pid) not in ("T", "t"):  # the signal is delivered asynchronously
            time.sleep(0.001)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return  # closing the probe's descriptor lets go of the lock
        except BlockingIOError:
            worker.send_signal(signal.SIGCONT)
        finally:
            os.close(fd)


def _state(pid: int) -> str:
    """The process's state letter from /proc/<pid>/stat (after the command's closing parenthesis)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
