"""Whole-folder work sized to the folder (service.core.io.trees): small folders on the event loop, large
ones in a thread; copies keep an agent's links as links, never the bytes they point at."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from service.core.io.trees import SMALL_ENTRIES, copy_tree, entries_below, on_folder, remove_tree


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


def tree_of(root: Path) -> dict[str, str]:
    """What a folder holds, by relative path: a file's text, a link's target, '<dir>' for a folder."""
    held: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            held[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            held[name] = "<dir>"
        else:
            held[name] = path.read_text()
    return held


async def test_a_small_plain_copy_makes_the_tree_shutil_would(tmp_path: Path) -> None:
    """The one-walk copy of a small folder (file contents only) holds what `shutil.copytree` would copy:
    nested folders, an empty one, the files' bytes, links to a file and to a folder kept as links (the
    folder behind a link is not walked), and the destination's missing parents are made."""
    memory = fill(tmp_path / "memory", 12)  # part-0 and part-1
    (memory / "empty").mkdir()
    (memory / "part-1" / "up").symlink_to(tmp_path)
    (memory / "part-0" / "note").symlink_to(memory / "part-0" / "f0.md")
    ours = tmp_path / "run-3" / "deep" / "memory"
    await copy_tree(memory, ours, plain=True)
    theirs = tmp_path / "theirs"
    shutil.copytree(memory, theirs, symlinks=True, copy_function=shutil.copyfile)
    assert tree_of(ours) == tree_of(theirs)
    assert len(tree_of(ours)) == 12 + 5


async def test_remove_tree_removes_any_folder_and_ignores_a_missing_one(tmp_path: Path) -> None:
    """A folder of many files is removed whole; a path that is not there is no error."""
    large = fill(tmp_path / "large", 2 * SMALL_ENTRIES)
    await remove_tree(large)
    assert not large.exists()
    await remove_tree(tmp_path / "missing")
