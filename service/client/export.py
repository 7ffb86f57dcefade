"""`tunefleet export`: a version of a tuning's instructions written out as plain files, to take home.

The store keeps the instructions as a bare git repository (`<store>/tunings/<name>/system.git`); export
writes one version's files (by default `main`, the version the fleet serves now) into a new or empty
folder, writable, with no `.git`: what the tuning started from, edited. It reads the store alone: no
Redis, no daemon.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path
from typing import NamedTuple

from service.core.errors import ConfigError, SystemRepoError
from service.core.io import objects
from service.core.io.git import git
from service.core.store import TuningStore
from service.core.system import MAIN_REF
from service.kinds.evals.models import COMMIT_RE


class Exported(NamedTuple):
    version: str
    """The commit id written out."""
    is_main: bool
    """Whether it is the tuning's current version (`main`)."""
    files: int


async def export_version(tuning: TuningStore, dest: Path, version: str | None = None) -> Exported:
    """Write `version` (main, initial, a commit id or a unique prefix of one; default main) of
    the tuning's instructions into `dest`, which must be new or empty. ConfigError for a folder that is
    not, SystemRepoError for a version the repository does not hold."""
    tuning.config()  # UnknownTuningError for a tuning the store does not hold
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"{dest} is not an empty folder: export writes into a new or empty one")
    main = await _resolve(tuning, "main")
    chosen = main if version is None else await _resolve(tuning, version)
    staging = dest.resolve().parent / f".{dest.name}.export-{os.getpid()}"
    try:
        await asyncio.to_thread(objects.extract, tuning.repo, chosen, staging)
        await asyncio.to_thread(_writable, staging)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    finally:
        if staging.exists():
            await asyncio.to_thread(_writable, staging)
            shutil.rmtree(staging)
    files = sum(1 for path in dest.rglob("*") if not path.is_dir())
    return Exported(chosen, chosen == main, files)


async def _resolve(tuning: TuningStore, version: str) -> str:
    """The full commit id of `version`: main, initial (the version the system was imported as), or a
    commit id or unique prefix of one (4 to 40 hex digits)."""
    repo = f"--git-dir={tuning.repo}"
    if version == "initial":
        return (await git(repo, "rev-list", "--max-parents=0", MAIN_REF)).decode().split()[-1]
    if version in ("main", MAIN_REF) or COMMIT_RE.match(version):
        try:
            return (
                (await git(repo, "rev-parse", "--verify", "--quiet", f"{version}^{{commit}}"))
                .decode()
                .strip()
            )
        except SystemRepoError:
            pass
    raise SystemRepoError(
        f"tuning {tuning.name}: --version {version!r}: no such version; expected main, initial or the id of "
        f"one of its commits (`git --git-dir {tuning.repo} log --oneline main` lists them)"
    )


def _writable(root: Path) -> None:
    """Give the owner write access to every file and folder below `root` (the store extracts them
    read-only: a snapshot is shared by runs; an export is the user's to edit)."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
