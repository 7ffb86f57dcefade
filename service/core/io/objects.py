"""The system repository's objects made and read in this process (libgit2, through pygit2).

An apply's commit was five `git` processes under the improvements lock (`add` into a temporary index,
`ls-files`, `write-tree`, `rev-parse`, `commit-tree`) and a snapshot was `git archive` read by Python's
`tarfile`: about 0.8 ms of the worker's CPU to start each process, and a tar filter that resolves every
member's path (`bench commits`). Here a folder's tree is the one `git add --all --force` would stage
from the same files, except that nothing in the folder (an ignore file, an attributes file, a filter)
changes what is recorded: the version holds the folder's bytes. An extracted snapshot holds exactly
the version's files; `main` is moved by compare-and-set. `service.core.io.git` still runs the commands
that read history, make the repository or talk to remotes.

The folder is untrusted (an agent wrote it): each file is read through a descriptor opened relative to
its folder, never through a link; a link pointing out of the folder, a `.git` below its top, a pipe, a
device or a socket is refused with `SystemRepoError` naming it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pygit2

from service.core.errors import SystemRepoError
from service.core.io.files import FOLDER_FLAGS, NotRegularFile, open_regular

BLOB = pygit2.enums.FileMode.BLOB
EXECUTABLE = pygit2.enums.FileMode.BLOB_EXECUTABLE
LINK = pygit2.enums.FileMode.LINK
TREE = pygit2.enums.FileMode.TREE
MAIN_REF = "refs/heads/main"
IDENTITY = ("tunefleet", "tunefleet@localhost")
"""Author and committer of every commit the fleet makes (service.core.io.git's identity)."""
READ_ONLY_DIR = 0o555
READ_ONLY_FILE = 0o444
STREAMED_BYTES = 1 << 20
"""A file at least this large is streamed into its blob rather than read whole (an agent may have left
one of any size)."""


def open_repository(path: Path) -> pygit2.Repository:
    """The bare repository at `path`, opened for one operation (libgit2 objects are not shared across
    threads)."""
    try:
        return pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as exc:
        raise SystemRepoError(f"repository {path} cannot be opened: {exc}") from exc


def _leaves(target: bytes, depth: int) -> bool:
    """Whether a link `depth` folders below the root, pointing at `target`, points out of the root."""
    if target.startswith(b"/"):
        return True
    for part in target.split(b"/"):
        if part == b"..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in (b"", b"."):
            depth += 1
    return False


class _TreeWriter:
    """Blobs and trees of one folder, written into one repository."""

    def __init__(self, repo: pygit2.Repository, root: Path) -> None:
        self.repo = repo
        self.odb = repo.odb
        self.root = root

    def _refuse(self, what: str) -> SystemRepoError:
        return SystemRepoError(f"folder {self.root}{what}")

    def tree(self, dir_fd: int, rel: str, depth: int) -> pygit2.Oid | None:
        """The tree of the open folder `dir_fd` (`rel` below the root); None when it holds no file (git
        records no empty folder)."""
        builder = self.repo.TreeBuilder()
        with os.scandir(dir_fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            where = f"{rel}{name}"
            if name == ".git":
                if depth:
                    raise self._refuse(f" holds a git repository at {rel.rstrip('/')}: commit plain files")
                continue  # the folder's own: never read, never committed
            entry = self._entry(dir_fd, name, where, depth)
            if entry is not None:
                self._insert(builder, name, where, *entry)
        return builder.write() if len(builder) else None

    def _entry(self, dir_fd: int, name: str, where: str, depth: int) -> tuple[pygit2.Oid, int] | None:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(os.fsencode(name), dir_fd=dir_fd)
            if _leaves(target, depth):
                link = f"{where} -> {os.fsdecode(target)}"
                raise self._refuse(f": symbolic link {link} points outside the folder")
            return self.repo.create_blob(target), LINK
        if stat.S_ISDIR(info.st_mode):
            fd = os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
            try:
                tree = self.tree(fd, f"{where}/", depth + 1)
            finally:
                os.close(fd)
            return None if tree is None else (tree, TREE)
        if not stat.S_ISREG(info.st_mode):
            raise self._refuse(f": {where} is not a file, a folder or a symbolic link")
        mode = EXECUTABLE if info.st_mode & stat.S_IXUSR else BLOB
        return self._blob(dir_fd, name, where), mode

    def _blob(self, dir_fd: int, name: str, where: str) -> pygit2.Oid:
        """A regular file's blob, the file opened relative to its folder and never through a link (it was
        a file a moment ago, but an agent still running could swap it)."""
        try:
            opened = open_regular(name, dir_fd=dir_fd)
        except NotRegularFile as exc:
            raise self._refuse(f": {where} changed while it was being recorded ({exc})") from exc
        if opened is None:
            raise self._refuse(f": {where} went away while it was being recorded")
        with opened as file:
            if os.fstat(file.fileno()).st_size >= STREAMED_BYTES:
                return self.repo.create_blob_fromiobase(file)
            data = file.read()
        # Most files of a folder are the version's, unchanged: hashing one and finding it stored is a
        # fifteenth of asking libgit2 to write it (which then touches the stored object's time).
        oid = pygit2.hash(data)
        return oid if self.odb.exists(oid) else self.repo.create_blob(data)

    def _insert(self, builder: pygit2.TreeBuilder, name: str, where: str, oid: pygit2.Oid, mode: int) -> None:
        try:
            builder.insert(name, oid, mode)
        except (UnicodeError, ValueError, pygit2.GitError) as exc:
            raise self._refuse(f": {where} cannot be recorded: {exc}") from exc


def folder_tree(repo_path: Path, folder: Path) -> str:
    """The tree holding exactly `folder`'s files (its own `.git`, if any, left out), written into the
    repository; every refusal is a SystemRepoError naming the entry."""
    repo = open_repository(repo_path)
    try:
        fd = os.open(folder, FOLDER_FLAGS)
    except OSError as exc:
        raise SystemRepoError(f"folder {folder} cannot be read: {exc.strerror}") from exc
    try:
        tree = _TreeWriter(repo, folder).tree(fd, "", 0)
        return str(tree if tree is not None else repo.TreeBuilder().write())
    except (OSError, pygit2.GitError) as exc:
        raise SystemRepoError(f"folder {folder} cannot be recorded: {exc}") from exc
    finally:
        os.close(fd)


def commit(repo_path: Path, tree: str, parent: str, message: str) -> str:
    """A new commit of `tree` on top of `parent` (no ref moves)."""
    repo = open_repository(repo_path)
    who = pygit2.Signature(*IDENTITY)
    try:
        return str(
            repo.create_commit(None, who, who, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=parent)])
        )
    except (ValueError, pygit2.GitError) as exc:
        raise SystemRepoError(f"commit of tree {tree} on {parent} failed: {exc}") from exc


def _commit(repo: pygit2.Repository, commit_id: str, what: str) -> pygit2.Commit:
    """The commit `commit_id` names; SystemRepoError saying `what` it is when it names none."""
    try:
        found = repo.revparse_single(f"{commit_id}^{{commit}}")
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise SystemRepoError(f"{what} {commit_id} is not a commit") from exc
    assert isinstance(found, pygit2.Commit)
    return found


def tree_of(repo_path: Path, commit_id: str) -> str:
    """The tree of the commit `commit_id`."""
    return str(_commit(open_repository(repo_path), commit_id, "version").tree_id)


def _descends(repo: pygit2.Repository, new: pygit2.Oid, current: pygit2.Oid) -> bool:
    try:
        return repo.descendant_of(new, current)
    except pygit2.GitError as exc:
        raise SystemRepoError(f"{MAIN_REF} at {current} cannot be compared with {new}: {exc}") from exc


def move_main(repo_path: Path, version: str, base: str | None) -> bool:
    """Move `main` to `version`, only ever forward; whether it moved. With `base` (the version `version`
    was made from) the common case is one compare-and-set; otherwise, or when `main` is elsewhere, it
    moves only if `version` descends from where `main` is. Each move is a compare-and-set on `main`'s
    value as read (libgit2 refuses it if another process moved `main` meanwhile: then read again)."""
    repo = open_repository(repo_path)
    new = _commit(repo, version, "version").id
    while True:
        ref = repo.references.get(MAIN_REF)
        current = None if ref is None else ref.target
        if ref is None or not isinstance(current, pygit2.Oid):
            raise SystemRepoError(f"repository {repo_path} has no {MAIN_REF} naming a commit")
        if current == new:
            return False
        if not (base is not None and str(current) == base) and not _descends(repo, new, current):
            return False  # older than main, or beside it: a late mover changes nothing
        try:
            ref.set_target(new)
            return True
        except pygit2.GitError as exc:
            again = repo.references.get(MAIN_REF)
            if again is not None and again.target != current:
                continue  # moved meanwhile by another: decide again
            raise SystemRepoError(f"{MAIN_REF} of {repo_path} cannot be moved to {version}: {exc}") from exc


def _safe_name(name: str) -> bool:
    return name not in ("", ".", "..", ".git") and "/" not in name and "\0" not in name


def _stored(repo: pygit2.Repository, oid: pygit2.Oid, where: str) -> pygit2.Object:
    try:
        return repo[oid]
    except KeyError:
        raise SystemRepoError(f"object {oid} of {where} is missing from the repository") from None


def _write_tree(repo: pygit2.Repository, tree: pygit2.Tree, dir_fd: int, rel: str) -> None:
    for entry in tree:
        name = entry.name
        if name is None or not _safe_name(name):
            raise SystemRepoError(f"entry {rel}{name!r} is not a file name")
        if entry.filemode == TREE:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            fd = os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
            try:
                subtree = _stored(repo, entry.id, f"{rel}{name}")
                assert isinstance(subtree, pygit2.Tree)
                _write_tree(repo, subtree, fd, f"{rel}{name}/")
                os.fchmod(fd, READ_ONLY_DIR)
            finally:
                os.close(fd)
        elif entry.filemode == LINK:
            os.symlink(_stored(repo, entry.id, f"{rel}{name}").read_raw(), name, dir_fd=dir_fd)
        elif entry.filemode in (BLOB, EXECUTABLE):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
            try:
                with os.fdopen(os.dup(fd), "wb") as file:
                    file.write(_stored(repo, entry.id, f"{rel}{name}").read_raw())
                os.fchmod(fd, READ_ONLY_FILE | (0o111 if entry.filemode == EXECUTABLE else 0))
            finally:
                os.close(fd)
        # a gitlink (a commit of another repository) has no content here: the fleet never records one


def extract(repo_path: Path, version: str, staging: Path) -> None:
    """Write `version`'s files into the new folder `staging`, read-only below it (executable bits kept).
    A failure leaves `staging` for the caller to remove."""
    repo = open_repository(repo_path)
    found = _commit(repo, version, "version")
    staging.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    fd = os.open(staging, FOLDER_FLAGS)
    try:
        root = _stored(repo, found.tree_id, "the version's top folder")
        assert isinstance(root, pygit2.Tree)
        _write_tree(repo, root, fd, "")
    except (OSError, pygit2.GitError, SystemRepoError) as exc:
        raise SystemRepoError(f"version {version} cannot be extracted: {exc}") from exc
    finally:
        os.close(fd)
