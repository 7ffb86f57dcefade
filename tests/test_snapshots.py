"""Snapshots and private copies of a version: the runs and applies that first need one at the same
moment share one extraction; what a snapshot holds (exactly the version's files, as git itself would
check them out) and how its extraction fails; and that making them, for a version of many files, leaves
the worker's event loop free for its other jobs. Real repositories, made and read by real git."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from service.core.errors import SystemRepoError
from service.core.system import SystemRepo
from tests.support.git import run
from tests.test_system_git import new_repo
from tests.test_trees import fill


class ExtractionCounter:
    """The snapshot extractions this process begins while `counting`: each makes its staging folder
    `snapshots/.<version>.<pid>.<n>` first (an audit hook: a hook stays for the process's life, so it
    counts only when asked)."""

    def __init__(self) -> None:
        self.counting = False
        self.seen: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.counting and event == "os.mkdir" and isinstance(args[0], str | os.PathLike):
            path = Path(args[0])
            if path.parent.name == "snapshots" and path.name.startswith("."):
                self.seen.append(path.name)


EXTRACTIONS = ExtractionCounter()
sys.addaudithook(EXTRACTIONS)


async def test_concurrent_first_uses_of_a_version_share_one_extraction(tmp_path: Path) -> None:
    """Twenty runs asking at once for a version no one extracted yet get one read-only tree, made by a
    single extraction; a later run reuses it without another."""
    repo, version = await new_repo(tmp_path)
    EXTRACTIONS.seen.clear()
    EXTRACTIONS.counting = True
    try:
        trees = await asyncio.gather(*(repo.snapshot(version) for _ in range(20)))
        assert set(trees) == {tmp_path / "snapshots" / version}
        assert (trees[0] / "skills" / "style.md").read_text() == "Short sentences.\n"
        assert await repo.snapshot(version) == trees[0]
    finally:
        EXTRACTIONS.counting = False
    assert len(EXTRACTIONS.seen) == 1, EXTRACTIONS.seen
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == [version]


class Ticker:
    """Counts the event loop's turns while it runs: a loop held by a synchronous call counts none."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns += 1

    async def __aenter__(self) -> Ticker:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        self.turns = 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_a_private_copy_of_many_files_leaves_the_event_loop_turning(tmp_path: Path) -> None:
    """Copying a 1,500-file version for an analyzer or an applier is done in a thread: the loop turns
    meanwhile (it turned not once while a synchronous copy held it), and the copy is whole and writable."""
    files = 1500
    source = fill(tmp_path / "source", files)
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    version = await repo.init_from(source)
    await repo.snapshot(version)  # extracted beforehand: the copy below has no git call to await
    async with Ticker() as ticker:
        copy = await repo.private_copy(version, tmp_path / "analyze" / "system")
    assert ticker.turns > 0
    copied = [p for p in copy.rglob("*") if p.is_file()]
    assert len(copied) == files
    assert all(p.stat().st_mode & stat.S_IWUSR for p in copied)


async def test_a_snapshot_is_read_only_and_keeps_executable_bits(tmp_path: Path) -> None:
    """A version's snapshot holds its files read-only, executable bits kept; made once and then shared."""
    source = tmp_path / "source"
    (source / "skills").mkdir(parents=True)
    (source / "AGENTS.md").write_text("Be careful.\n")
    (source / "skills" / "check.sh").write_text("#!/bin/sh\necho ok\n")
    (source / "skills" / "check.sh").chmod(0o755)
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    version = await repo.init_from(source)
    snapshot = await repo.snapshot(version)
    assert (snapshot / "AGENTS.md").read_text() == "Be careful.\n"
    assert not (snapshot / "AGENTS.md").stat().st_mode & stat.S_IWUSR
    assert (snapshot / "skills" / "check.sh").stat().st_mode & stat.S_IXUSR
    assert await repo.snapshot(version) == snapshot


async def test_an_empty_version_is_an_empty_snapshot(tmp_path: Path) -> None:
    """A version with no file at all is an empty folder, not an error."""
    source = tmp_path / "source"
    source.mkdir()
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    version = await repo.init_from(source)
    snapshot = await repo.snapshot(version)
    assert snapshot.is_dir() and list(snapshot.iterdir()) == []


async def test_a_version_that_cannot_be_read_is_an_error_that_leaves_nothing_behind(tmp_path: Path) -> None:
    """When one of a version's objects is missing from the repository, the snapshot fails with
    SystemRepoError naming the version, and no half-made folder is left among the snapshots; once the
    object is back, a later call extracts it whole."""
    source = tmp_path / "source"
    (source / "skills").mkdir(parents=True)
    (source / "AGENTS.md").write_text("Be careful.\n")
    (source / "skills" / "style.md").write_text("Short sentences.\n")
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    version = await repo.init_from(source)
    blob = run(f"--git-dir={repo.repo}", "rev-parse", f"{version}:skills/style.md")
    stored = repo.repo / "objects" / blob[:2] / blob[2:]
    kept = stored.read_bytes()
    stored.unlink()
    with pytest.raises(SystemRepoError, match=rf"version {version} cannot be extracted"):
        await repo.snapshot(version)
    assert list((tmp_path / "snapshots").iterdir()) == []
    stored.write_bytes(kept)
    assert (await repo.snapshot(version) / "skills" / "style.md").read_text() == "Short sentences.\n"


async def test_a_snapshot_holds_what_git_checks_out(tmp_path: Path) -> None:
    """A snapshot of a version with folders, an executable, links and an attributes file that asks git to
    leave files out of archives is file for file, mode for mode, what `git checkout` of it writes."""
    source = tmp_path / "source"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "deep.md").write_text("deep\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "up").symlink_to("a/b/deep.md")
    (source / "a" / "back").symlink_to("../run.sh")
    (source / ".gitattributes").write_text("*.md export-ignore\n")
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    version = await repo.init_from(source)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    run(f"--git-dir={repo.repo}", f"--work-tree={checkout}", "checkout", version, "--", ".")
    snapshot = await repo.snapshot(version)
    assert listing(snapshot) == listing(checkout)
    assert (snapshot / "a" / "b" / "deep.md").read_text() == "deep\n"


def listing(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry below `root`: its kind with its executable bit, and its content or link target."""
    entries = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            entries[name] = ("link", os.readlink(path))
        elif path.is_dir():
            entries[name] = ("folder", "")
        else:
            executable = "x" if path.stat().st_mode & stat.S_IXUSR else "-"
            entries[name] = (f"file {executable}", path.read_text())
    return entries
