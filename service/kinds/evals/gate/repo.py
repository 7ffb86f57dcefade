"""What the gate asks of the system repository, beside service.core.system: refs that keep candidates
and rejected candidates alive, and the re-application of a candidate's edits on a newer version.

`rebase` re-applies the edits of a candidate (its base to its commit) on top of `onto`, a version
published since (a descendant of the base): a three-way merge of `onto` and the candidate, whose merge
base is the candidate's base, done in the object store alone (`git merge-tree --write-tree`, no work
tree). A conflict is an answer, not an error: the candidate is rejected for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.core.io.git import run_git
from service.core.system import SystemRepo

CANDIDATES = "refs/tunefleet/candidates"
REJECTED = "refs/tunefleet/rejected"
_REF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def ref_name(prefix: str, *parts: str) -> str:
    """A ref under `prefix` named by `parts` (each a slug-like name git accepts as a path component)."""
    for part in parts:
        if not _REF_PART.fullmatch(part):
            raise ValueError(f"{part!r} cannot be part of a git ref name")
    return "/".join((prefix, *parts))


async def _git(repo: SystemRepo, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
    done = await run_git(f"--git-dir={repo.repo}", *args, timeout_s=repo.git_timeout_s, ok_exits=ok)
    return done.exit, done.out.decode(errors="replace").strip()


async def read_ref(repo: SystemRepo, ref: str) -> str | None:
    """The commit `ref` points at, None if there is no such ref."""
    code, out = await _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1))
    return out if code == 0 and out else None


async def set_ref(repo: SystemRepo, ref: str, commit: str) -> None:
    """Point `ref` at `commit` (which keeps the commit from git's garbage collection)."""
    await _git(repo, "update-ref", ref, commit)


async def parent_of(repo: SystemRepo, commit: str) -> str:
    return (await _git(repo, "rev-parse", "--verify", f"{commit}^1"))[1]


async def changed_files(repo: SystemRepo, older: str, newer: str) -> set[str]:
    """The paths that differ between two versions."""
    out = (await _git(repo, "diff", "--name-only", "--no-renames", "-z", older, newer))[1]
    return {path for path in out.split("\0") if path}


@dataclass(frozen=True)
class Rebased:
    """A candidate's edits re-applied on a newer version."""

    tree: str | None
    """The merged tree; None when the edits conflict with what was published since."""
    overlap: list[str]
    """Files both the candidate and the versions published since its base changed."""
    conflict: str = ""


async def rebase(repo: SystemRepo, candidate: str, base: str, onto: str) -> Rebased:
    """Re-apply `candidate` (made on `base`) on top of `onto`."""
    mine = await changed_files(repo, base, candidate)
    theirs = await changed_files(repo, base, onto)
    overlap = sorted(mine & theirs)
    code, out = await _git(
        repo, "merge-tree", "--write-tree", "--no-messages", "--name-only", onto, candidate, ok=(0, 1)
    )
    lines = out.splitlines()
    if code == 1:
        return Rebased(
            None,
            overlap,
            f"the edits conflict with versions published since in {', '.join(lines[1:]) or '?'}",
        )
    return Rebased(lines[0], overlap)
