"""13. An apply's commit and a snapshot's extraction: made in the worker's process (libgit2 through
pygit2, `service/core/io/objects.py`) against the git processes that made them before 4 December, 22:00 UTC,
in the same run, taking turns.

A system of FILES prose files in FOLDERS folders is committed; then ROUNDS times each way: an edited
private copy committed on top of the version (`SystemRepo.commit_folder` against `git add --all
--force` into a temporary index, `write-tree`, `rev-parse` of the base's tree and `commit-tree`), and a
new version's snapshot extracted (`SystemRepo.snapshot` against `git archive` read by `tarfile` with
its data filter, then made read-only). CPU is the process's and its git children's together
(`getrusage`, RUSAGE_SELF + RUSAGE_CHILDREN), so work moved into a child is not work saved. The commit
is made under the improvements lock, so its wall time is time every other apply of the tuning waits.

    PYTHONPATH=. .venv/bin/python -m bench commits
"""

from __future__ import annotations

import io
import resource
import tarfile
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from bench.big_system import write_system
from bench.common import ROOT, Figure, discard, median, run_async
from service.core.io.git import git
from service.core.system import SystemRepo

NAME = "commits"
FOLDERS = 5
FILES = 50
ROUNDS = 15
T = TypeVar("T")


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _git_commit(repo: SystemRepo, folder: Path, base: str, message: str) -> str:
    """The commit as the fleet made it with git processes (its tree compared with the base's)."""
    index = {"GIT_INDEX_FILE": str(folder.parent / "index")}
    where = (f"--git-dir={repo.repo}", f"--work-tree={folder}", "-c", "core.fsmonitor=false")
    await git(*where, "add", "--all", "--force", ".", env=index, cwd=folder)
    tree = (await git(*where, "write-tree", env=index)).decode().strip()
    base_tree = (await git(f"--git-dir={repo.repo}", "rev-parse", f"{base}^{{tree}}")).decode().strip()
    assert tree != base_tree
    out = await git(f"--git-dir={repo.repo}", "commit-tree", tree, "-p", base, stdin=message.encode())
    return out.decode().strip()


async def _git_extract(repo: SystemRepo, version: str, target: Path) -> None:
    """The snapshot as the fleet made it: `git archive` read by tarfile, then made read-only."""
    archive = await git(f"--git-dir={repo.repo}", "archive", "--format=tar", version)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    for path in target.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o444 | (path.stat().st_mode & 0o111))
        elif path.is_dir() and not path.is_symlink():
            path.chmod(0o555)


async def _timed(work: Awaitable[T]) -> tuple[T, float, float]:
    """What `work` (a coroutine not yet started) returns, the CPU ms and the wall ms it took."""
    cpu0, wall0 = _cpu_s(), time.perf_counter()
    result = await work
    return result, (_cpu_s() - cpu0) * 1000, (time.perf_counter() - wall0) * 1000


async def measure(root: Path) -> dict[str, list[tuple[float, float]]]:
    """(CPU ms, wall ms) of every round, each way."""
    source = root / "source"
    write_system(source, FILES, FOLDERS, lines=20)
    repo = SystemRepo(root / "system.git", root / "snapshots")
    base = await repo.init_from(source)
    folder = await repo.private_copy(base, root / "apply" / "system")
    got: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("commit", "git_commit", "extract", "git_extract")
    }
    for n in range(ROUNDS):
        (folder / "skills-0" / "skill-0.md").write_text(f"- rule: fleet {n}\n")
        ours, cpu_ms, wall_ms = await _timed(repo.commit_folder(folder, base, f"fleet {n}\n"))
        got["commit"].append((cpu_ms, wall_ms))
        (folder / "skills-0" / "skill-0.md").write_text(f"- rule: git {n}\n")
        theirs, cpu_ms, wall_ms = await _timed(_git_commit(repo, folder, base, f"git {n}\n"))
        got["git_commit"].append((cpu_ms, wall_ms))
        assert ours is not None
        _, cpu_ms, wall_ms = await _timed(repo.snapshot(ours))
        got["extract"].append((cpu_ms, wall_ms))
        _, cpu_ms, wall_ms = await _timed(_git_extract(repo, theirs, root / "git" / str(n)))
        got["git_extract"].append((cpu_ms, wall_ms))
    return got


def run() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix=f"{NAME}-", dir=ROOT / "var" / "bench"))
    try:
        got = run_async(measure(root))
    finally:
        discard(root)
    m = {k: median([cpu for cpu, _ in v]) for k, v in got.items()}
    m |= {f"{k}_wall": median([wall for _, wall in v]) for k, v in got.items()}
    setup = f"a system of {FILES} files in {FOLDERS} folders, {ROUNDS} rounds taking turns, medians"
    return [
        Figure(
            NAME,
            "CPU per apply commit (process and git children)",
            m["commit"],
            "ms",
            m["git_commit"],
            "git add, write-tree, rev-parse, commit-tree",
            "< the git processes'",
            m["commit"] < m["git_commit"],
            f"{setup}; wall {m['commit_wall']:.1f} ms against {m['git_commit_wall']:.1f} ms (held under the "
            "improvements lock)",
        ),
        Figure(
            NAME,
            "CPU per snapshot extraction (process and git children)",
            m["extract"],
            "ms",
            m["git_extract"],
            "git archive into tarfile",
            "< the git processes'",
            m["extract"] < m["git_extract"],
            f"{setup}; wall {m['extract_wall']:.1f} ms against {m['git_extract_wall']:.1f} ms",
        ),
    ]
