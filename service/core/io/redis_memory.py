"""Whether Redis is full: at its `maxmemory` under `noeviction`, it refuses every write that may grow
its memory (OOM), and the fleet can record nothing (workers.store_full hands the jobs back meanwhile).
Read from `INFO memory`, which a full Redis still answers, for `/readyz` and `status`."""

from __future__ import annotations

from typing import Any


def full_reason(memory: dict[str, Any]) -> str | None:
    """Why Redis refuses writes, from its `INFO memory`; None while it takes them (no `maxmemory`, an
    evicting policy, or room left)."""
    limit = int(memory.get("maxmemory", 0) or 0)
    used = int(memory.get("used_memory", 0) or 0)
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if limit <= 0 or policy != "noeviction" or used < limit:
        return None
    return f"Redis is full: {used:,} bytes used of maxmemory {limit:,} (noeviction): it refuses writes"
