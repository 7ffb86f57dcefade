"""The bound on a run's memory (`memory_max_entries`, `memory_max_mb`): the runner is untrusted, and the
fleet copies a passing run's memory into each try of phase `mem` (and into an agent analyzer's folder)
and keeps it in the memory store. A memory past the bound is neither copied nor kept: the case ends
`difficult`, reason `memory too large: ...`. It is measured only until it passes the bound, so a memory
of a million files costs the walk of `memory_max_entries` of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from service.core.io.trees import SMALL_ENTRIES, folder_size
from service.core.models.tuning import TuningConfig

BYTES_PER_MB = 1_000_000


async def memory_oversize(config: TuningConfig, memory: Path) -> str | None:
    """Why the memory folder `memory` is past the tuning's bound (None: it is within it, or absent)."""
    max_bytes = int(config.memory_max_mb * BYTES_PER_MB)
    first = min(config.memory_max_entries, SMALL_ENTRIES)  # a small memory is measured here, in one walk
    size = folder_size(memory, first, max_bytes)
    if size.over and size.entries > first and first < config.memory_max_entries:  # a large one: in a thread
        size = await asyncio.to_thread(folder_size, memory, config.memory_max_entries, max_bytes)
    if not size.over:
        return None
    if size.entries > config.memory_max_entries:
        held = f"more than {config.memory_max_entries} files, folders and links (memory_max_entries)"
    else:
        held = f"more than {config.memory_max_mb:g} MB (memory_max_mb)"
    return f"memory too large: the passing run's memory holds {held}"
