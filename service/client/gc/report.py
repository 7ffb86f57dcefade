"""What one `tunefleet gc` removed (or would), and the measure of what that frees."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Kind = Literal["snapshot", "cancelled", "eval_items", "eval_redis", "void", "candidate_ref", "repo_packed"]


class Removal(BaseModel):
    """One thing gc removes (or would)."""

    kind: Kind
    tuning: str
    name: str = Field(
        description="The snapshot's version, the cancelled job's id, the evaluation's id, the void try's "
        "folder (<case>/r<rev>/<phase>/<n>.void-<k>), the candidate's ref, or the repository packed; for "
        "`eval_redis`, the evaluation whose head and counters left Redis."
    )
    bytes: int = Field(default=0, description="Bytes freed on the store's disk.")
    inodes: int = 0
    redis_fields: int = Field(default=0, description="Hash fields removed from Redis (`eval_redis`).")
    redis_bytes: int = Field(
        default=0,
        description="The names and values of those fields, in bytes: what Redis frees, before its own "
        "per-field overhead (tens of bytes each).",
    )


class GcReport(BaseModel):
    """What one gc removed (`applied`) or would remove, and what it kept and why."""

    applied: bool
    removals: list[Removal] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list, description="What a category left alone, and why.")
    added_bytes: int = Field(
        default=0, description="What gc writes into the store: the record of evaluations retired from Redis."
    )
    added_inodes: int = Field(default=0, description="The files gc creates in the store (that record's).")

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)

    @property
    def inodes(self) -> int:
        return sum(r.inodes for r in self.removals)

    @property
    def redis_bytes(self) -> int:
        return sum(r.redis_bytes for r in self.removals)


def footprint(root: Path) -> tuple[int, int]:
    """The bytes (of regular files) and inodes (files, folders and links, `root` included) under `root`."""
    try:
        if not root.is_dir() or root.is_symlink():
            return root.lstat().st_size, 1
    except FileNotFoundError:
        return 0, 0
    size, inodes = 0, 1
    for folder, dirs, files in os.walk(root):
        inodes += len(dirs) + len(files)
        for name in files:
            try:
                size += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return size, inodes
