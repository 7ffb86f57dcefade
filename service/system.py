"""The system repository: the instructions being tuned, kept as git in the store.

A version is a commit. Runs work on read-only snapshots of one version; an apply edits a
private worktree and commits there; which commit is *current* is decided by the fenced publish
in Redis (workers.lock), mirrored to `refs/heads/main` here for when Redis loses it.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import stat
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from service.errors import SystemRepoError

MAIN_REF = "refs/heads/main"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tunefleet",
    "GIT_AUTHOR_EMAIL": "tunefleet@localhost",
    "GIT_COMMITTER_NAME": "tunefleet",
    "GIT_COMMITTER_EMAIL": "tunefleet@localhost",
}


async def git(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    """Run one git command; its stdout, or SystemRepoError with its stderr."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_TERMINAL_PROMPT": "0"}
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise SystemRepoError(f"git {' '.join(args)}: exit {proc.returncode}: {err.decode().strip()}")
    return out


def tree_digest(root: Path) -> str:
    """A digest of every file's relative path and bytes below `root` (to see whether it was edited)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _make_read_only(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        elif path.is_dir():
            path.chmod(
                stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
            )


def _make_writable(root: Path) -> None:
    root.chmod(root.stat().st_mode | stat.S_IWUSR)
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


class SystemRepo:
    """The bare repository of one tuning, its snapshots and its apply worktrees."""

    def __init__(self, repo: Path, snapshots: Path, worktrees: Path) -> None:
        self.repo = repo
        self.snapshots = snapshots
        self.worktrees = worktrees
        self._extracting: dict[str, asyncio.Task[Path]] = {}
        """Snapshots this process is extracting now: concurrent runs of one version share one."""

    async def _git(self, *args: str) -> str:
        return (await git(f"--git-dir={self.repo}", *args)).decode().strip()

    async def init_from(self, source: Path) -> str:
        """Create the repository from a folder of instructions (once); the first version."""
        if (self.repo / "HEAD").exists():
            return await self.head()
        if not source.is_dir():
            raise SystemRepoError(f"system folder {source} does not exist")
        staging = self.repo.with_name(self.repo.name + f".init-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        await git("init", "--quiet", "--bare", "--initial-branch=main", str(staging))
        work = Path(str(staging) + "-work")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(source, work, ignore=shutil.ignore_patterns(".git"))
        base = (f"--git-dir={staging}", f"--work-tree={work}")
        await git(*base, "add", "--all", ".")
        await git(*base, "commit", "--quiet", "--allow-empty", "-m", f"tunefleet: import {source.name}")
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
        version the new one was made from), the common case is one compare-and-set."""
        if base is not None:
            try:
                await self._git("update-ref", MAIN_REF, version, base)
                return
            except SystemRepoError:
                pass  # main is not at base: decide by ancestry below
        current = await self.head()
        if current == version or not await self.is_ancestor(current, version):
            return
        await self._git("update-ref", MAIN_REF, version, current)

    async def snapshot(self, version: str) -> Path:
        """A read-only tree of `version`, extracted once and shared by every run."""
        target = self.snapshots / version
        if target.is_dir():
            return target
        task = self._extracting.get(version)
        if task is None:
            task = asyncio.ensure_future(self._extract(version, target))
            self._extracting[version] = task
            task.add_done_callback(lambda _: self._extracting.pop(version, None))
        return await asyncio.shield(task)

    async def _extract(self, version: str, target: Path) -> Path:
        archive = await git(f"--git-dir={self.repo}", "archive", "--format=tar", version)
        staging = self.snapshots / f".{version}.{os.getpid()}.{id(archive)}"
        staging.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        _make_read_only(staging)
        try:
            staging.rename(target)
        except OSError:
            _make_writable(staging)
            shutil.rmtree(staging)
        return target

    async def private_copy(self, version: str, dest: Path) -> Path:
        """A writable copy of `version` that nothing else sees (for the analyzer)."""
        source = await self.snapshot(version)
        if dest.exists():
            _make_writable(dest)
            shutil.rmtree(dest)
        shutil.copytree(source, dest)
        _make_writable(dest)
        return dest

    @asynccontextmanager
    async def worktree(self, version: str, name: str) -> AsyncIterator[Path]:
        """A private worktree of `version`, removed on exit."""
        path = self.worktrees / name
        if path.exists():
            shutil.rmtree(path)
            await self._git("worktree", "prune")
        self.worktrees.mkdir(parents=True, exist_ok=True)
        await self._git("worktree", "add", "--quiet", "--detach", str(path), version)
        try:
            yield path
        finally:
            try:
                await self._git("worktree", "remove", "--force", str(path))
            except SystemRepoError:
                shutil.rmtree(path, ignore_errors=True)
                await self._git("worktree", "prune")

    async def commit(self, worktree: Path, base: str, message: str) -> str | None:
        """Commit every change in the worktree on top of whatever the agent committed itself; the new
        commit, or None when the tree is still `base`'s."""
        await git("add", "--all", ".", cwd=worktree)
        try:
            await git("commit", "--quiet", "-m", message, cwd=worktree)
        except SystemRepoError:  # nothing staged: did the agent commit by itself?
            if (await git("rev-parse", "HEAD", cwd=worktree)).decode().strip() == base:
                return None
            await git("commit", "--quiet", "--allow-empty", "-m", message, cwd=worktree)
        return (await git("rev-parse", "HEAD", cwd=worktree)).decode().strip()

    async def find_published(self, trailer: str, current: str) -> str | None:
        """The commit reachable from `current` whose message holds `trailer`, if any."""
        out = await self._git("log", "--format=%H", "--fixed-strings", f"--grep={trailer}", current)
        return out.splitlines()[0] if out else None

    async def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            await self._git("merge-base", "--is-ancestor", older, newer)
        except SystemRepoError:
            return False
        return True

    async def mirror(self, remote: str, branch: str, version: str) -> None:
        """Push a published version to the user's own remote branch."""
        await self._git("push", "--quiet", "--force", remote, f"{version}:refs/heads/{branch}")

    async def message(self, version: str) -> str:
        return await self._git("log", "-1", "--format=%B", version)
