"""The gate's index of the cases that passed: a Redis sorted set kept as cases end, so that a gate draws
its `sample` of them in O(sample) reads instead of walking every case folder of the tuning.

`tf:gate-passed:<tuning>:<seed>` holds, with every score 0 (so Redis orders it by member), one member
`<rank>:<case id>` per case that ended `completed`, where `<rank>` is the hex of the gate's seeded rank
(`rank`): reading it from the start is reading the cases in the draw's order.
A case's end (under a gate that draws passed cases) adds its member *before* its `result.json` is
written, so the set holds every case that
passed (and perhaps some that are not passing now: a newer rev, a worker that died before writing).
A draw reads the set in chunks and keeps a case only if its newest rev's `result.json` says
`completed`, as the walk did: the same cases in the same order, one folder read per case drawn.

The set is complete only once filled from the store: its `!built:<mtime of tuning.json>` member says
that a walk of the case folders added every case that had passed by then (cases that end meanwhile add
their own). A gate that finds no such member for the tuning file it runs on (Redis lost it, the gate
is new, its seed changed: the tuning was registered again) walks once, as before, and adds it. A tuning
without such a gate keeps no index (Redis holds nothing per case for it); a worker whose tuning file
changed since it read it notes under the default seed all the same, so a gate added meanwhile misses
no case that ends after its first walk.
"""

from __future__ import annotations

import asyncio
import hashlib

from redis.asyncio import Redis

from service.core import keys
from service.core.io.files import read_model
from service.core.models.acceptance import GateConfig
from service.core.models.case import Case
from service.core.models.records import CaseResult
from service.core.models.tuning import TuningConfig
from service.core.store import CaseStore, TuningStore

BUILT = "!built:"
CHUNK = 64
"""Members read per round trip while drawing."""


def rank(seed: int, case_id: str) -> bytes:
    """A case's place in the gate's seeded draw (lowest first)."""
    return hashlib.sha256(f"gate:{seed}:{case_id}".encode()).digest()


def passed_cases(tuning: TuningStore, held_out: frozenset[str], but: str) -> list[Case]:
    """The tuning's cases whose newest rev ended `completed` (every published version went through the
    gate, so they pass on the current version as far as the gates sampled), except case `but`: a walk of
    every case folder, which fills the index once."""
    found = []
    for case_store in tuning.latest_revs():
        if case_store.case_id == but or case_store.case_id in held_out:
            continue
        case = _if_passed(case_store, case_store.result())
        if case is not None:
            found.append(case)
    return found


def _if_passed(case_store: CaseStore, result: CaseResult | None) -> Case | None:
    """The case of `case_store` when its `result` is `completed` (None otherwise, or when unreadable)."""
    if result is None or result.state != "completed":
        return None
    return case_store.load_case()


def member(seed: int, case_id: str) -> str:
    return f"{rank(seed, case_id).hex()}:{case_id}"


def index_seed(config: TuningConfig, stale: bool) -> int | None:
    """The seed of the index a case of a tuning run on `config` notes its pass in: its gate's when the
    gate draws cases that passed; else (no such gate, no index to keep) None, unless the tuning file
    changed since `config` was read (`stale`: it may have a gate now), then the default seed."""
    gate = config.gate
    if gate is not None and gate.cases in ("passed", "both"):
        return gate.seed
    return GateConfig().seed if stale else None


async def note_passed(redis: Redis, tuning: str, seed: int, case_id: str) -> None:
    """A case of `tuning` is ending `completed`: into its gate's index for `seed` (`index_seed`), before
    its result is written."""
    await redis.zadd(keys.gate_passed(tuning, seed), {member(seed, case_id): 0})


async def draw_passed(
    redis: Redis, config: GateConfig, tuning: TuningStore, skip: frozenset[str], wanted: int
) -> list[Case]:
    """The first `wanted` cases in the seeded draw's order whose newest rev ended `completed`, but those
    in `skip` (the case applying, the held-out ones, the regression folder's)."""
    if wanted <= 0:
        return []
    key = keys.gate_passed(tuning.name, config.seed)
    built = f"{BUILT}{tuning.config_file.stat().st_mtime_ns}"
    if await redis.zscore(key, built) is None:
        await _build(redis, key, config.seed, tuning, built)
    found: list[Case] = []
    start = 0
    while len(found) < wanted:
        chunk = [raw.decode() for raw in await redis.zrange(key, start, start + CHUNK - 1)]
        if not chunk:
            break
        start += len(chunk)
        ids = [m.split(":", 1)[1] for m in chunk if not m.startswith("!")]
        ids = [case_id for case_id in ids if case_id not in skip]
        found += await asyncio.to_thread(_passing, tuning, ids, wanted - len(found))
    return found


async def _build(redis: Redis, key: str, seed: int, tuning: TuningStore, built: str) -> None:
    """Fill the index from a walk of the case folders (off the event loop), then mark it built."""
    cases = await asyncio.to_thread(passed_cases, tuning, frozenset(), "")
    members = {member(seed, case.id): 0 for case in cases}
    if members:
        await redis.zadd(key, members)
    old = [m for m in (raw.decode() for raw in await redis.zrange(key, 0, 7)) if m.startswith(BUILT)]
    await redis.zadd(key, {built: 0})
    if old:
        await redis.zrem(key, *old)


def _passing(tuning: TuningStore, case_ids: list[str], limit: int) -> list[Case]:
    """The first `limit` of `case_ids` whose newest rev ended `completed`, in the same order, as cases."""
    found: list[Case] = []
    for case_id in case_ids:
        if len(found) == limit:
            break
        case_store = tuning.newest(case_id)
        if case_store is None:
            continue
        case = _if_passed(case_store, read_model(case_store.result_file, CaseResult))
        if case is not None:
            found.append(case)
    return found
