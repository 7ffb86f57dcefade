"""A process's long-lived objects kept out of the garbage collector's full passes.

A worker imports its modules and builds its runtime once, and keeps all of it until it exits; after a
first LLM job it also keeps the LLM adapters' modules (workers.adapters.factory). The daemon keeps its
client, its API's modules and what its start registered. CPython's full pass walks every tracked
object each time, and it comes when the jobs' own objects have piled up: in `bench slots` (a hundred
cases ending and a hundred starting together) a 60 ms pass fell into the hand-over in every run, and
every start of that hand-over waited for it; in `bench reconcile`, with the heap a long-running process
keeps, passes of 190 ms held the daemon's loop (its API and its lease renewal) against 12 ms frozen.
`gc.freeze()` moves what exists now into the permanent generation, which no pass walks; the pass then
walks what the jobs made (20 to 25 ms).

A worker calls it once it is up and once after the LLM modules' import, the daemon once its start has
registered the tunings: objects made after a freeze are walked as usual, and frozen ones are never
freed by a pass (so each freeze follows a collection, which frees the garbage of the start first).
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect the garbage made so far, then exempt every object left from the full passes."""
    gc.collect()
    gc.freeze()
