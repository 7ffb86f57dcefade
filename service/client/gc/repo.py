"""gc of a tuning's system repository: the candidate refs of tries whose apply was decided, then its
loose refs and objects packed.

A candidate is kept under `refs/tunefleet/candidates/<case>/r<rev>/<phase>-<attempt>` while its gate (or
a person) decides; the ref is read only until the try's `apply.json` is written (a worker that takes the
case over finds the applier's commit there). Once that record is `retention_candidate_age_s` old the ref
goes: a published candidate is in the first-parent chain of the current version, a rejected one under
its `refs/tunefleet/rejected/` ref, and those are what `versions`, `why`, `diff` and REPORT.md read. The
rejected refs are kept whatever their age (they are the history's rejected rows); what they cost on
disk (one file each, and the loose objects of their commits) is reclaimed by packing: `git pack-refs
--all` and `git repack -a -d -k`, which puts every object, reachable or not, into one pack and
removes nothing but the loose copies and the packs it merged. git's own locks make both safe beside
the fleet's writers (an object or ref written meanwhile stays loose, for the next gc).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from service.client.gc.report import Removal, footprint
from service.core.io.git import run_git
from service.core.store import TuningStore
from service.kinds.evals.gate.repo import CANDIDATES

PACKED = "system.git"
LOOSE_MIN = 16
"""Fewer loose refs and objects than this are left loose: a pack of every object per gc is not worth
a handful of files (every publish leaves its `main` ref loose)."""


async def candidate_refs(
    tuning: TuningStore, age_s: float, git_timeout_s: float, apply: bool
) -> list[Removal]:
    """The candidate refs of the tuning's decided tries past `age_s`, each with its loose file's size
    (removed with `apply`), then the repository packed (module docstring). With `apply` the figures add
    up to the repository's footprint before less after: what git freed beside the refs' own files (the
    folders it emptied, the loose objects it packed) is the `repo_packed` removal's."""
    if not tuning.repo.is_dir():
        return []
    git = f"--git-dir={tuning.repo}"
    listed = await run_git(git, "for-each-ref", "--format=%(refname)", CANDIDATES, timeout_s=git_timeout_s)
    now_s = time.time()
    old = [ref for ref in listed.out.decode().split() if _decided_before(tuning, ref, now_s - age_s)]
    removals = [_ref_removal(tuning, ref) for ref in old]
    size, inodes = await asyncio.to_thread(loose, tuning.repo)
    size, inodes = size - sum(r.bytes for r in removals), inodes - sum(r.inodes for r in removals)
    to_pack = inodes >= LOOSE_MIN
    if not apply:
        if to_pack:
            removals.append(
                Removal(kind="repo_packed", tuning=tuning.name, name=PACKED, bytes=size, inodes=inodes)
            )
        return removals
    before = await asyncio.to_thread(footprint, tuning.repo)
    if old:
        script = "".join(f"delete {ref}\n" for ref in old).encode()
        await run_git(git, "update-ref", "--stdin", stdin=script, timeout_s=git_timeout_s)
    if to_pack:
        await run_git(git, "pack-refs", "--all", timeout_s=git_timeout_s)
        await run_git(git, "repack", "-a", "-d", "-k", "-q", timeout_s=git_timeout_s)
    after = await asyncio.to_thread(footprint, tuning.repo)
    rest = (
        before[0] - after[0] - sum(r.bytes for r in removals),
        before[1] - after[1] - sum(r.inodes for r in removals),
    )
    if to_pack or rest != (0, 0):
        removals.append(
            Removal(kind="repo_packed", tuning=tuning.name, name=PACKED, bytes=rest[0], inodes=rest[1])
        )
    return removals


def _ref_removal(tuning: TuningStore, ref: str) -> Removal:
    """A candidate ref's removal, with its loose file's size (none once packed)."""
    try:
        size, inodes = (tuning.repo / ref).lstat().st_size, 1
    except FileNotFoundError:
        size, inodes = 0, 0
    return Removal(kind="candidate_ref", tuning=tuning.name, name=ref, bytes=size, inodes=inodes)


def _decided_before(tuning: TuningStore, ref: str, before_s: float) -> bool:
    """Whether `ref` names a try of this tuning whose apply.json was written before `before_s`."""
    parts = ref.removeprefix(CANDIDATES + "/").split("/")
    if len(parts) != 3 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
        return False  # a case id git would not take is kept under its digest: kept, never guessed
    phase, _, attempt = parts[2].rpartition("-")
    if phase not in ("nomem", "mem") or not attempt.isdigit():
        return False
    record = tuning.case(parts[0], int(parts[1][1:])).attempt(phase, int(attempt)).apply  # type: ignore[arg-type]
    try:
        return record.stat().st_mtime <= before_s
    except FileNotFoundError:
        return False


def loose(repo: Path) -> tuple[int, int]:
    """The bytes and inodes of the repository's loose refs and loose objects (what packing frees,
    less the pack it writes)."""
    size = inodes = 0
    for top in ("refs", "objects"):
        for folder, _, files in os.walk(repo / top):
            if top == "objects" and len(os.path.basename(folder)) != 2:
                continue  # objects/pack, objects/info
            for name in files:
                inodes += 1
                try:
                    size += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    continue
    return size, inodes
