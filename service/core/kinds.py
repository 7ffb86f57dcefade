"""The contract every job kind plugs into, and the registry the core's machinery loops over.

A kind is a slice: a package on the service side (`service/kinds/<kind>/`, or any importable package)
whose `slice` module holds `SLICE`, a `KindSlice`, and a package on the workers' side whose module named
by `KindSlice.workers` holds `KIND` (a `workers.envelope.JobKind`). The daemon reconciles every kind
through its `fleet`, the event sink moves counters through its `counter_rule`, and the front ends find
a kind's HTTP routes, commands and metrics in its `api`, `cli` and `metrics` modules when it has them
(service.api.app, service.cli.main, service.metrics). The built-in kinds are listed once, in
service.kinds.registry; a deployment (or a test) adds its own with the `kinds` setting.
The core names no kind: it loads them by the names it is given.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from arq.connections import ArqRedis

from service.core.errors import ConfigError
from service.core.events import CounterRule
from service.core.settings import FleetSettings
from service.core.store import Store, TuningStore


@dataclass(frozen=True)
class FleetParts:
    """What a kind's fleet side is built from: the fleet's Redis, its store and its settings."""

    redis: ArqRedis
    store: Store
    settings: FleetSettings


class KindFleet(Protocol):
    """A kind's fleet side as the daemon uses it."""

    async def reconcile(self) -> int:
        """Enqueue again every unfinished job of the kind that has neither a queue entry nor a lease
        (after a crash, or after Redis lost them); how many were enqueued."""
        ...

    def stored_counters(self, tuning: TuningStore) -> dict[str, int]:
        """The kind's counters in the tuning's counters hash (`tf:stats:<tuning>`) as the store gives
        them, for the daemon's restore after Redis lost them (made in a thread: it reads the store)."""
        ...


@dataclass(frozen=True)
class KindSlice:
    """One kind of job, as its service slice registers it."""

    name: str
    """The kind's name: its slice's folder and its word in docs and logs."""
    package: str
    """Its service slice's package (where its `api`, `cli` and `metrics` modules are looked for)."""
    workers: str
    """The module of its workers' side, which holds `KIND`."""
    fleet: Callable[[FleetParts], KindFleet]
    """Its fleet side, built once per daemon or client."""
    counter_rule: CounterRule | None = None
    """The counters its events move (service.core.events.counter_moves), if any."""

    def front(self, role: str) -> ModuleType | None:
        """The slice's front-end module for `role` (`api`, `cli`, `metrics`), or None if it has none."""
        name = f"{self.package}.{role}"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                return None
            raise


def load_slices(packages: Sequence[str]) -> tuple[KindSlice, ...]:
    """The kinds whose service packages are named, in that order; ConfigError naming the package whose
    `slice` module is missing or holds no `SLICE`, or a name taken twice."""
    found: list[KindSlice] = []
    for package in packages:
        try:
            module = importlib.import_module(f"{package}.slice")
        except ModuleNotFoundError as exc:
            raise ConfigError(f"kinds: {package!r} has no module {package}.slice ({exc})") from exc
        kind = getattr(module, "SLICE", None)
        if not isinstance(kind, KindSlice):
            raise ConfigError(f"kinds: {package}.slice holds no SLICE (a service.core.kinds.KindSlice)")
        if any(k.name == kind.name for k in found):
            raise ConfigError(f"kinds: the kind name {kind.name!r} is taken twice ({package})")
        found.append(kind)
    return tuple(found)
