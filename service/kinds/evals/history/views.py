"""The three views of a tuning's history that every front end offers: its versions, the diff between two
of them and the reasons behind one. Each name is resolved against the tuning's own rows first
(history.names); git is then given full commit ids only."""

from __future__ import annotations

from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.history.models import VersionDiff, VersionList, VersionWhy
from service.kinds.evals.history.names import resolve
from service.kinds.evals.history.read import HistoryReader


class VersionViews:
    """The history views of the tunings in one store (`current`: the fleet's pointer, when known)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.evals = EvalFiles(store)

    def _reader(self, tuning: str) -> HistoryReader:
        return HistoryReader(self.store.known_tuning(tuning), self.evals)

    def versions(self, tuning: str, current: str | None = None) -> VersionList:
        return self._reader(tuning).versions(current)

    def diff(self, tuning: str, a: str, b: str, current: str | None = None) -> VersionDiff:
        reader = self._reader(tuning)
        found = reader.versions(current)
        older, newer = resolve(found, a), resolve(found, b)
        patch = reader.history.diff(older.id, newer.id)
        stats = patch.stats
        return VersionDiff(
            tuning=tuning,
            a=a,
            b=b,
            a_id=older.id,
            b_id=newer.id,
            added=stats.insertions,
            removed=stats.deletions,
            patch=patch.patch or "",
        )

    def why(self, tuning: str, version: str, current: str | None = None) -> VersionWhy:
        reader = self._reader(tuning)
        return reader.why(resolve(reader.versions(current), version))
