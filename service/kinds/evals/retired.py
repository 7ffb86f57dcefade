"""Evaluations retired from Redis: their progress as the list showed it, kept in the store.

`tunefleet gc` (service.client.gc.evals_redis) removes from Redis the head (`tf:evals`) and the
per-evaluation counters (`eval:<id>:*` in `tf:stats:<tuning>`) of the acceptance gate's ended
evaluations past `retention_eval_item_age_s`. So that `eval status`, `GET /api/evals` and the
daemon's reconciliation answer as before, it first appends the evaluation's progress (exactly as
Redis gave it) to `<store>/evals/.retired.jsonl`, one JSON line each:

- the list of evaluations is Redis's heads plus these lines (Redis's own entry wins for an id in both:
  a line written by a gc that then failed before its removal);
- the reconciliation does not put back the head of a retired evaluation, and the counters rebuilt
  after a loss of Redis leave out its per-evaluation fields (the tuning's sums, `eval_items:*`,
  tokens and cost, keep counting its items).

Every other read of an evaluation (results, show, compare, the report, versions, why) reads its
folder (`RESULTS.json`, items' outcomes), which gc keeps. The file's name starts with a dot: it is no
evaluation's id (ids are slugs starting with a letter or digit), and `EvalsStore.all()` skips it (no
spec inside). A line that does not parse is left out (the evaluation then leaves the list: it is
never put back in Redis wrongly).

The file grows by one line per retired evaluation and is never rewritten. The list reads it whole (it
shows every evaluation); the daemon's reconciliation, every `reconcile_interval_s`, needs only the ids,
and `ids()` parses only the lines appended since its last call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

from service.kinds.evals.models import EvalProgress

RETIRED_FILE = ".retired.jsonl"


class RetiredEvals:
    """The store's record of evaluations retired from Redis (module docstring)."""

    def __init__(self, evals_root: Path) -> None:
        self.path = evals_root / RETIRED_FILE
        self._ids: set[str] = set()
        self._read_from: tuple[int, int] = (0, 0)
        """The file `_ids` was read from (its inode) and how much of it (whole lines only: a line being
        appended is read next time)."""
        self._ids_lock = threading.Lock()

    def ids(self) -> frozenset[str]:
        """The retired evaluations' ids, as `read()` would give them, parsing only the lines appended since
        the last call (a file replaced meanwhile, by hand, is read again from its start)."""
        with self._ids_lock:
            try:
                with self.path.open("rb") as file:
                    found = os.fstat(file.fileno())
                    inode, done = self._read_from
                    if found.st_ino != inode or found.st_size < done:
                        self._ids.clear()
                        done = 0
                    file.seek(done)
                    tail = file.read(found.st_size - done)
            except FileNotFoundError:
                self._ids.clear()
                self._read_from = (0, 0)
                return frozenset()
            whole = tail.rfind(b"\n") + 1
            self._ids.update(progress.head.id for progress in _parsed(tail[:whole]))
            self._read_from = (found.st_ino, done + whole)
            return frozenset(self._ids)

    def read(self) -> dict[str, EvalProgress]:
        """Each retired evaluation's progress, by id (the last line of an id wins)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        return {progress.head.id: progress for progress in _parsed(raw)}

    def add(self, progress: list[EvalProgress]) -> None:
        """Append these evaluations' progress, flushed to disk before their Redis entries go."""
        if not progress:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = b"".join(p.model_dump_json().encode() + b"\n" for p in progress)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(lines)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)


def _parsed(raw: bytes) -> Iterator[EvalProgress]:
    """The progress of each line that parses, in order."""
    for line in raw.splitlines():
        try:
            yield EvalProgress.model_validate_json(line)
        except ValueError:
            continue
