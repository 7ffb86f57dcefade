"""What the history reads of a tuning's system repository, in this process (pygit2): the first-parent
chain of `main`, the candidates kept under refs, a commit's trailers, its size and its diff.

The fleet's commits say where they came from in their message (workers.steps.apply): the attempt's
trailer names the tuning, the case, its rev and the try; the output trailer holds the applier's output
(its summary among it); a re-based publish names the candidate it re-applies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pygit2

from service.core.errors import SystemRepoError
from service.core.io.objects import MAIN_REF, open_repository
from service.kinds.evals.history.models import Origin
from service.kinds.evals.history.tokens import count_tokens

ATTEMPT_TRAILER = "Tunefleet-Attempt: "
OUTPUT_TRAILER = "Tunefleet-Output: "
TEXT_MAX_BYTES = 1 << 20
"""A blob at least this large, or holding a NUL byte, is not prose: it counts no tokens."""


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parent: str | None
    at: datetime
    origin: Origin | None
    summary: str


def _origin(value: str) -> Origin | None:
    parts = value.strip().split("/")
    if len(parts) != 5 or not parts[2].startswith("r"):
        return None
    try:
        return Origin(case=parts[1], rev=int(parts[2][1:]), phase=parts[3], attempt=int(parts[4]))
    except ValueError:
        return None


def info(commit: pygit2.Commit) -> CommitInfo:
    """What a commit's message and header say of it."""
    origin, summary = None, ""
    for line in commit.message.splitlines():
        if line.startswith(ATTEMPT_TRAILER):
            origin = _origin(line.removeprefix(ATTEMPT_TRAILER))
        elif line.startswith(OUTPUT_TRAILER):
            try:
                summary = str(json.loads(line.removeprefix(OUTPUT_TRAILER)).get("summary", ""))
            except (ValueError, AttributeError):
                summary = ""
    if origin is None and not commit.parents:
        summary = commit.message.strip().splitlines()[0] if commit.message.strip() else ""
    parent = str(commit.parent_ids[0]) if commit.parent_ids else None
    return CommitInfo(
        str(commit.id), parent, datetime.fromtimestamp(commit.commit_time, UTC), origin, summary
    )


class History:
    """One tuning's repository, opened for one read of its history."""

    def __init__(self, repo_path: Path) -> None:
        self.repo = open_repository(repo_path)
        self._sizes: dict[str, int] = {}

    def commit(self, commit_id: str) -> pygit2.Commit:
        try:
            found = self.repo[commit_id]
        except (KeyError, ValueError) as exc:
            raise SystemRepoError(f"version {commit_id} is not in the repository") from exc
        if not isinstance(found, pygit2.Commit):
            raise SystemRepoError(f"version {commit_id} is not a commit")
        return found

    def main(self) -> str:
        ref = self.repo.references.get(MAIN_REF)
        if ref is None:
            raise SystemRepoError(f"repository {self.repo.path} has no {MAIN_REF}")
        return str(ref.resolve().target)

    def chain(self, head: str) -> list[pygit2.Commit]:
        """`head` and its first parents, oldest first."""
        found = []
        commit: pygit2.Commit | None = self.commit(head)
        while commit is not None:
            found.append(commit)
            commit = commit.parents[0] if commit.parents else None
        return found[::-1]

    def refs(self, prefix: str) -> Iterator[tuple[str, str]]:
        """Every (ref, commit) under `prefix`."""
        for name in self.repo.references:
            if name.startswith(prefix + "/"):
                target = self.repo.references[name].resolve().target
                yield name, str(target)

    def tokens(self, commit: pygit2.Commit) -> int:
        """The tokens (cl100k_base) of every text file of the version (history.tokens)."""
        tree = str(commit.tree_id)
        if tree not in self._sizes:
            self._sizes[tree] = sum(count_tokens(text) for _, text in self.texts(commit.tree))
        return self._sizes[tree]

    def texts(self, tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, str]]:
        """(path, text) of every text file below `tree`."""
        for entry in tree:
            obj = self.repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                yield from self.texts(obj, f"{prefix}{entry.name}/")
            elif isinstance(obj, pygit2.Blob) and entry.filemode != pygit2.enums.FileMode.LINK:
                data = obj.data
                if len(data) < TEXT_MAX_BYTES and b"\0" not in data:
                    yield f"{prefix}{entry.name}", data.decode(errors="replace")

    def diff(self, older: str | None, newer: str) -> pygit2.Diff:
        """The diff from `older` (None: nothing) to `newer`."""
        new_tree = self.commit(newer).tree
        if older is None:
            return new_tree.diff_to_tree(swap=True)
        return self.commit(older).tree.diff_to_tree(new_tree)

    def lines(self, older: str | None, newer: str) -> tuple[int, int]:
        """Lines added and removed from `older` to `newer`."""
        stats = self.diff(older, newer).stats
        return stats.insertions, stats.deletions
