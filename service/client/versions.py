"""A tuning's history through the client (service.kinds.evals.history): its versions, a diff and the
reasons behind a version, read from the store off the event loop, `main` being the fleet's current
version as Redis holds it (the repository's `main` when Redis has none)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from service.core import keys
from service.core.store import Store
from service.kinds.evals.approval import Decision, Verdict, decide
from service.kinds.evals.history.models import VersionDiff, VersionList, VersionWhy
from service.kinds.evals.history.views import VersionViews


class Versions:
    """The history views of the fleet's tunings."""

    def __init__(self, redis: Redis, store: Store) -> None:
        self._redis = redis
        self._store = store
        self._views = VersionViews(store)

    async def _current(self, tuning: str) -> str | None:
        found = await self._redis.get(keys.version(tuning))
        return None if found is None else bytes(found).decode()

    async def list(self, tuning: str) -> VersionList:
        """Every published version and rejected candidate of `tuning`, oldest first."""
        current = await self._current(tuning)
        return await asyncio.to_thread(self._views.versions, tuning, current)

    async def diff(self, tuning: str, a: str, b: str) -> VersionDiff:
        """The changes from version `a` to version `b` (each resolved against the tuning's own)."""
        current = await self._current(tuning)
        return await asyncio.to_thread(self._views.diff, tuning, a, b, current)

    async def why(self, tuning: str, version: str) -> VersionWhy:
        """The feedback, analysis and gate evidence behind `version`."""
        current = await self._current(tuning)
        return await asyncio.to_thread(self._views.why, tuning, version, current)

    async def decide(
        self, tuning: str, candidate: str, verdict: Verdict, by: str, note: str = ""
    ) -> Decision:
        """Approve or reject a candidate that waits for a person (`gate.approval: manual`)."""
        return await asyncio.to_thread(decide, self._store, tuning, candidate, verdict, by, note)
