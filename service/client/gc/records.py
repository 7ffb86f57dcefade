"""gc of the bulky folders of tries nobody reads any more, keeping every record a read needs.

- **An evaluation's items** (`evals/<eval>/items/<case>/<k>/` and `<k>.void-<n>/`), once it ended (its
  `RESULTS.json` holds the summary and the per-case rows) at least `retention_eval_item_age_s` ago:
  everything in each item's folder but its outcome, `item.json`, goes; the folders stay. So the
  items' walk (`EvalStore.scan`) still finds every outcome and every void try: the results, a
  comparison, a report, the gates that pair a new candidate's runs with this base version's, and the
  daemon's reconciliation read what they read before.
- **A case's void tries** (`<phase>/<n>.void-<k>/`), in a case that ended (it has a `result.json`),
  whose folder last changed at least `retention_void_age_s` ago: the agents' folders inside
  (`run-<token>/`, `analyze-<token>/`: workspace, home, memory, logs) go; the try's records
  (`run.json`, `feedback.json`, `analysis.md`) stay, since `show`, the case's spend and the counters
  rebuilt after a loss of Redis read them, and the folder's name counts the voids of its try.

Both are plain functions of the store, run off the event loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from service.client.gc.report import Removal, footprint
from service.core.errors import StoreError
from service.core.store import PHASES, TuningStore
from service.core.system import remove_tree
from service.kinds.evals.results import read_results
from service.kinds.evals.store import ITEM_FILE, EvalsStore, EvalStore


def eval_items(evals_root: Path, age_s: float, apply: bool) -> tuple[list[Removal], list[str]]:
    """The removals of every ended evaluation's items' folders (module docstring), and what was kept."""
    removals: list[Removal] = []
    kept: list[str] = []
    for found in EvalsStore(evals_root).all():
        try:
            results = read_results(found)  # keeps RESULTS.json once every item has its outcome
        except StoreError as exc:
            kept.append(f"evaluation {found.run_id}: {exc}")
            continue
        if results.status not in ("finished", "cancelled") or not found.results_file.exists():
            continue
        if time.time() - found.results_file.stat().st_mtime < age_s:  # written just now, perhaps
            continue
        removal = _remove_all(
            _item_leftovers(found), apply, kind="eval_items", tuning=results.tuning, name=found.run_id
        )
        if removal is not None:
            removals.append(removal)
    return removals, kept


def _item_leftovers(found: EvalStore) -> Iterator[Path]:
    """Every entry of every item's folder but its outcome (the folders themselves stay)."""
    items = found.items_dir
    for case_id in _names(items):
        for name in _names(items / case_id):
            folder = items / case_id / name
            if not folder.is_dir():
                continue
            for entry in _names(folder):
                if entry != ITEM_FILE:
                    yield folder / entry


def voids(tuning: TuningStore, age_s: float, apply: bool) -> list[Removal]:
    """The removals of the agents' folders of the void tries of the tuning's ended cases (module
    docstring)."""
    removals: list[Removal] = []
    now_s = time.time()
    for case_store in tuning.case_revs():
        if not case_store.result_file.exists():
            continue
        for phase in PHASES:
            folder = case_store.root / phase
            for name in _names(folder):
                void = folder / name
                if ".void-" not in name or not void.is_dir() or now_s - void.stat().st_mtime < age_s:
                    continue
                agents = [void / entry for entry in _names(void) if (void / entry).is_dir()]
                where = f"{case_store.case_id}/r{case_store.rev}/{phase}/{name}"
                removal = _remove_all(agents, apply, kind="void", tuning=tuning.name, name=where)
                if removal is not None:
                    removals.append(removal)
    return removals


def _remove_all(paths: Iterator[Path] | list[Path], apply: bool, **what: str) -> Removal | None:
    """One removal of every path in `paths` (removed with `apply`), None when there is none."""
    size = inodes = 0
    for path in list(paths):
        bytes_, count = footprint(path)
        size, inodes = size + bytes_, inodes + count
        if apply:
            _remove(path)
    if not inodes:
        return None
    return Removal(bytes=size, inodes=inodes, **what)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        path.unlink(missing_ok=True)


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
