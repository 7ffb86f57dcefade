"""Git for the tests: plain git commands, fake git binaries that fail on purpose, remotes that hang."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REAL_GIT = shutil.which("git")


def run(*args: str, cwd: Path | None = None) -> str:
    """A git command run the plain way, for setting up and checking (not through service.core.system)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def fake_git(folder: Path, body: str) -> Path:
    """A folder holding an executable `git` shell script with `body` (REAL_GIT names the real one)."""
    assert REAL_GIT is not None
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "git"
    script.write_text(f"#!/bin/sh\nREAL_GIT={REAL_GIT}\n{body}\n")
    script.chmod(0o755)
    return folder


def refuse_new_objects(repo: Path) -> None:
    """Make the bare repository `repo` refuse every new object while its existing ones stay readable:
    they are packed, and each of the 256 folders a new loose object would go into is a file instead."""
    run(f"--git-dir={repo}", "repack", "-a", "-d", "-q")
    run(f"--git-dir={repo}", "prune-packed")
    for fanout in range(256):
        folder = repo / "objects" / f"{fanout:02x}"
        if folder.is_dir():
            folder.rmdir()  # emptied by prune-packed
        folder.write_text("not a folder\n")


HANGING_HOOK = """#!/bin/sh
echo $$ > "$(dirname "$0")/hook.pid"
sleep 120
"""


def bare_remote(path: Path, hook: str | None = None) -> Path:
    run("init", "--quiet", "--bare", str(path))
    if hook is not None:
        (path / "hooks" / "pre-receive").write_text(hook)
        (path / "hooks" / "pre-receive").chmod(0o755)
    return path
