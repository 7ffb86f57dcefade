"""Whole-folder work sized to the folder (service.core.trees): small folders on the event loop, large
ones in a thread; copies keep an agent's links as links, never the bytes they point at."""

from __future__ import annotations

import threading
from pathlib import Path

from service.core.trees import SMALL_ENTRIES, copy_tree, entries_below, on_folder, remove_tree


def fill(folder: Path, files: int) -> Path:
    """`folder` with `files` files spread over subfolders of ten."""
    for n in range(files):
        sub = folder / f"part-{n // 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{n}.md").write_text(f"line {n}\n")
    return folder


def test_entries_are_counted_up_to_the_limit_without_following_links(tmp_path: Path) -> None:
    """Files and folders count, a link counts once (what it points at is not walked), the count stops at
    the limit, and a missing folder counts 0."""
    root = fill(tmp_path / "root", 5)  # part-0 and five files
    (root / "loop").symlink_to(tmp_path)  # would walk the whole tmp_path again if followed
    assert entries_below(root) == 7
    assert entries_below(fill(tmp_path / "big", 500), limit=50) == 50
    assert entries_below(tmp_path / "missing") == 0


async def test_small_folders_are_handled_on_the_loop_and_large_ones_in_a_thread(tmp_path: Path) -> None:
    """The work on a folder of a few entries runs on the event loop's own thread (no trip to a thread);
    on a folder of SMALL_ENTRIES entries or more it runs in another thread."""
    small = fill(tmp_path / "small", 3)
    large = fill(tmp_path / "large", SMALL_ENTRIES)
    here = threading.get_ident()
    assert await on_folder(small, threading.get_ident) == here
    assert await on_folder(large, threading.get_ident) != here


async def test_a_copy_keeps_an_agents_link_as_a_link(tmp_path: Path) -> None:
    """A memory folder holding a link to a file outside it (an agent can plant one) is copied with the
    link, not with the bytes it points at, small or large: the next agent gets no more than it could read."""
    secret = tmp_path / "secret.key"
    secret.write_text("s3cret\n")
    for name, files in (("small", 2), ("large", SMALL_ENTRIES)):
        memory = fill(tmp_path / name / "memory", files)
        (memory / "notes.md").symlink_to(secret)
        copy = tmp_path / name / "copy"
        await copy_tree(memory, copy, plain=True)
        assert (copy / "notes.md").is_symlink()
        assert (copy / "notes.md").readlink() == secret
        assert len(list(copy.rglob("*.md"))) == files + 1


async def test_remove_tree_removes_any_folder_and_ignores_a_missing_one(tmp_path: Path) -> None:
    """A folder of many files is removed whole; a path that is not there is no error."""
    large = fill(tmp_path / "large", 2 * SMALL_ENTRIES)
    await remove_tree(large)
    assert not large.exists()
    await remove_tree(tmp_path / "missing")
