"""Snapshots of a version: the runs and applies that first need one at the same moment share one
extraction (one `git archive`), with real git and real processes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tests.test_system_git import new_repo


class ArchiveCounter:
    """The `git archive` processes this process starts while `counting` (an audit hook: a hook stays
    for the process's life, so it counts only when asked)."""

    def __init__(self) -> None:
        self.counting = False
        self.seen: list[list[str]] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.counting and event == "subprocess.Popen":
            argv = [str(a) for a in (args[1] or [])]
            if "archive" in argv:
                self.seen.append(argv)


ARCHIVES = ArchiveCounter()
sys.addaudithook(ARCHIVES)


async def test_concurrent_first_uses_of_a_version_share_one_extraction(tmp_path: Path) -> None:
    """Twenty runs asking at once for a version no one extracted yet get one read-only tree, made by a
    single `git archive`; a later run reuses it without git."""
    repo, version = await new_repo(tmp_path)
    ARCHIVES.seen.clear()
    ARCHIVES.counting = True
    try:
        trees = await asyncio.gather(*(repo.snapshot(version) for _ in range(20)))
        assert set(trees) == {tmp_path / "snapshots" / version}
        assert (trees[0] / "skills" / "style.md").read_text() == "Short sentences.\n"
        assert await repo.snapshot(version) == trees[0]
    finally:
        ARCHIVES.counting = False
    assert len(ARCHIVES.seen) == 1, ARCHIVES.seen
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == [version]
