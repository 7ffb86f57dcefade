"""The kinds of leased job a worker runs (workers.envelope), found through the kinds' slices
(service.core.kinds): each slice names the module of its workers' side, which holds `KIND`."""

from __future__ import annotations

import importlib
from typing import Any

from service.core.errors import ConfigError
from service.core.kinds import KindSlice
from workers.envelope import JobKind


def job_kinds(kinds: tuple[KindSlice, ...]) -> dict[str, JobKind[Any, Any]]:
    """Each kind's `KIND` by the function name its jobs carry; ConfigError naming a module that holds
    none, or a function name taken twice."""
    found: dict[str, JobKind[Any, Any]] = {}
    for kind in kinds:
        module = importlib.import_module(kind.workers)
        job_kind = getattr(module, "KIND", None)
        if not isinstance(job_kind, JobKind):
            raise ConfigError(f"kinds: {kind.workers} holds no KIND (a workers.envelope.JobKind)")
        if job_kind.function in found:
            raise ConfigError(
                f"kinds: the job function {job_kind.function!r} is taken twice ({kind.workers})"
            )
        found[job_kind.function] = job_kind
    return found
