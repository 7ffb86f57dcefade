"""The system repository: the instructions being tuned, kept as git in the store.

A version is a commit. Runs work on read-only snapshots of one version; an apply edits a
private copy of the current version (a plain folder) and `commit_folder` records it; which commit
is *current* is decided by the fenced publish in Redis (workers.lock), mirrored to
`refs/heads/main` here for when Redis loses it.

The objects (a folder's tree, a commit, a version's files) are written and read in this process
(service.core.io.objects); the commands that move `main`, read history or talk to a remote are git's
own, run by service.core.io.git. Either way a failure is always a SystemRepoError, never an answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path

from service.core.errors import SystemRepoError
from service.core.io import objects
from service.core.io.git import DEFAULT_GIT_TIMEOUT_S, git
from service.core.io.trees import on_folder

MAIN_REF = objects.MAIN_REF
TREES_KEPT = 64


def tree_digest(root: Path) -> str:
    """A digest of every file's relative path and content below `root` (to see whether it was edited): a
    link's target, not what it points at; a file's bytes read a block at a time (an agent may have left
    one of any size)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        else:
            with path.open("rb") as file:
                digest.update(hashlib.file_digest(file, "sha256").digest())
        digest.update(b"\0")
    return digest.hexdigest()


def _make_writable(root: Path) -> None:
    root.chmod(root.stat().st_mode | stat.S_IWUSR)
    for path in root.rglob("*"):
        if not path.is_symlink():  # chmod would follow it
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def remove_tree(root: Path) -> None:
    """Remove the tree at `root`, its read-only folders made writable first."""
    _make_writable(root)
    shutil.rmtree(root)


def copy_writable(source: Path, dest: Path) -> None:
    """A writable copy of the folder `source` at `dest` (replacing it), symbolic links kept as links."""
    if dest.exists():
        remove_tree(dest)
    shutil.copytree(source, dest, symlinks=True)
    _make_writable(dest)


def _quiet(task: asyncio.Future[Path]) -> None:
    """Mark a background extraction's failure as seen (asyncio would log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


class SystemRepo:
    """The bare repository of one tuning and its snapshots."""

    def __init__(self, repo: Path, snapshots: Path, git_timeout_s: float = DEFAULT_GIT_TIMEOUT_S) -> None:
        self.repo = repo
        self.snapshots = snapshots
        self.git_timeout_s = git_timeout_s
        self._extracting: dict[str, asyncio.Task[Path]] = {}
        """Snapshots this process is extracting now: concurrent runs of one version share one."""
        self._trees: dict[str, str] = {}
        """Commit -> its tree, for the commits this process made or looked up (the latest TREES_KEPT)."""

    async def _git(self, *args: str) -> str:
        return (await git(f"--git-dir={self.repo}", *args, timeout_s=self.git_timeout_s)).decode().strip()

    async def init_from(self, source: Path) -> str:
        """Create the repository from a folder of instructions (once); the first version."""
        if (self.repo / "HEAD").exists():
            return await self.head()
        if not source.is_dir():
            raise SystemRepoError(f"system folder {source} does not exist")
        staging = self.repo.with_name(self.repo.name + f".init-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        timeout_s = self.git_timeout_s
        await git("init", "--quiet", "--bare", "--initial-branch=main", str(staging), timeout_s=timeout_s)
        work = Path(str(staging) + "-work")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(source, work, ignore=shutil.ignore_patterns(".git"))
        base = (f"--git-dir={staging}", f"--work-tree={work}")
        await git(*base, "add", "--all", ".", timeout_s=timeout_s)
        message = f"tunefleet: import {source.name}"
        await git(*base, "commit", "--quiet", "--allow-empty", "-m", message, timeout_s=timeout_s)
        shutil.rmtree(work)
        try:
            staging.rename(self.repo)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process registered it first
        return await self.head()

    async def head(self) -> str:
        return await self._git("rev-parse", "--verify", f"{MAIN_REF}^{{commit}}")

    async def update_main(self, version: str, base: str | None = None) -> None:
        """Mirror a published version to refs/heads/main, only ever forward: a late caller whose version
        is older than main (it was paused between publish and here) changes nothing. With `base` (the
        version the new one was made from), the common case is one compare-and-set
        (service.core.io.objects.move_main, in this process)."""
        objects.move_main(self.repo, version, base)

    async def snapshot(self, version: str) -> Path:
        """A read-only tree of `version`, extracted once and shared by every run."""
        target = self.snapshots / version
        if target.is_dir():
            return target
        return await asyncio.shield(self._extraction(version, target))

    def prefetch(self, version: str) -> None:
        """Start extracting `version`'s snapshot now, for the runs about to ask for it (`snapshot` then
        finds it extracted or under way). A failure is theirs to meet: their `snapshot` tries again."""
        target = self.snapshots / version
        if not target.is_dir():
            self._extraction(version, target).add_done_callback(_quiet)

    def _extraction(self, version: str, target: Path) -> asyncio.Task[Path]:
        """The extraction of `version` under way in this process, started if there is none."""
        task = self._extracting.get(version)
        if task is None:
            task = asyncio.ensure_future(self._extract(version, target))
            self._extracting[version] = task
            task.add_done_callback(lambda _: self._extracting.pop(version, None))
        return task

    async def _extract(self, version: str, target: Path) -> Path:
        """Write `version`'s files into a staging folder of this process (in a thread: once per version
        and worker), then give it the name `target`; a failure leaves no staging folder."""
        staging = self.snapshots / f".{version}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            await asyncio.to_thread(objects.extract, self.repo, version, staging)
        except Exception:  # not on a cancel: the thread may still be writing there
            if staging.exists():
                await asyncio.to_thread(remove_tree, staging)
            raise
        try:
            staging.rename(target)
        except OSError as exc:  # another extraction of the same version named its own first?
            await asyncio.to_thread(remove_tree, staging)
            if not target.is_dir():
                raise SystemRepoError(f"version {version} cannot be extracted: {exc}") from exc
        return target

    async def private_copy(self, version: str, dest: Path) -> Path:
        """A writable copy of `version` that nothing else sees (for the analyzer, and the folder the
        applier edits for `commit_folder`); symbolic links stay links. A version of many files is copied in
        a thread (service.core.io.trees)."""
        source = await self.snapshot(version)
        await on_folder(source, copy_writable, source, dest)
        return dest

    async def commit_folder(self, folder: Path, base: str, message: str) -> str | None:
        """A commit on top of `base` whose tree is the content of `folder` (a plain folder, not a git
        worktree), or None when that is `base`'s tree. The folder is read in this process
        (service.core.io.objects), never as a repository: a `.git` planted in it is neither read nor, like
        every `.git`, committed. Refused with SystemRepoError: a nested git repository, a symbolic link
        pointing out of the folder (no snapshot could hold it), a pipe, a device, and any failure to
        write the objects (never read as "nothing changed")."""
        if not folder.is_dir():
            raise SystemRepoError(f"folder {folder} does not exist")
        tree = await on_folder(folder, objects.folder_tree, self.repo, folder)
        if tree == await self.tree_of(base):
            return None
        return await self.commit_tree(tree, base, message)

    async def commit_tree(self, tree: str, parent: str, message: str) -> str:
        """A new commit of `tree` on top of `parent`; its tree is remembered (`tree_of`)."""
        version = objects.commit(self.repo, tree, parent, message)
        self._remember_tree(version, tree)
        return version

    async def tree_of(self, commit: str) -> str:
        """The tree of `commit` (remembered for the latest TREES_KEPT commits: a commit never changes)."""
        tree = self._trees.get(commit)
        if tree is None:
            tree = objects.tree_of(self.repo, commit)
            self._remember_tree(commit, tree)
        return tree

    def _remember_tree(self, commit: str, tree: str) -> None:
        if len(self._trees) >= TREES_KEPT:
            self._trees.pop(next(iter(self._trees)))
        self._trees[commit] = tree

    async def find_published(self, trailer: str, current: str) -> str | None:
        """The commit reachable from `current` whose message holds `trailer`, if any."""
        out = await self._git("log", "--format=%H", "--fixed-strings", f"--grep={trailer}", current)
        return out.splitlines()[0] if out else None

    async def mirror(self, remote: str, branch: str, version: str, timeout_s: float | None = None) -> None:
        """Push `version` to the user's own remote branch (forced), within `timeout_s` (default: the
        repository's git timeout)."""
        await git(
            f"--git-dir={self.repo}",
            "push",
            "--quiet",
            "--force",
            remote,
            f"{version}:refs/heads/{branch}",
            timeout_s=self.git_timeout_s if timeout_s is None else timeout_s,
        )

    async def diff(self, older: str, newer: str) -> str:
        """The changes from `older` to `newer` as a patch, with a summary of the files first."""
        if older == newer:
            return ""
        return await self._git("diff", "--stat", "--patch", "--no-color", "--no-ext-diff", older, newer)

    async def message(self, version: str) -> str:
        return await self._git("log", "-1", "--format=%B", version)
