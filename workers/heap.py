"""The worker's long-lived objects kept out of the garbage collector's full passes.

A worker imports its modules and builds its runtime once, and keeps all of it until it exits; after a
first LLM job it also keeps the LLM adapters' modules (workers.adapters.factory). CPython's full pass
walks every tracked object each time, and it comes when the jobs' own objects have piled up: in `bench
slots` (a hundred cases ending and a hundred starting together) a 60 ms pass fell into the hand-over
in every run, and every start of that hand-over waited for it. `gc.freeze()` moves what exists now into
the permanent generation, which no pass walks; the pass then walks what the jobs made (20 to 25 ms).

It is called once the worker is up and once after the LLM modules' import: objects made after a freeze
are walked as usual, and frozen ones are never freed (so each freeze follows a collection, which frees
the garbage of the start first).
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect the garbage made so far, then exempt every object left from the full passes."""
    gc.collect()
    gc.freeze()
