"""The store's memory keeping (what a completed case's memory folder holds) and its walk of the case
folders (the newest revisions, the unfinished ones, in bounded memory)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from service.core.store import Store


def test_submitted_memory_replaces_the_kept_one(tmp_path: Path) -> None:
    """Submitting a run's memory copies it whole and replaces what was kept for that case and rev."""
    tuning = Store(tmp_path / "store").tuning("t1")
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, text in ((first, "old"), (second, "new")):
        folder.mkdir()
        (folder / "memory.md").write_text(text)
    tuning.submit_memory("c1", 1, first)
    kept = tuning.submit_memory("c1", 1, second)
    assert (kept / "memory.md").read_text() == "new"
    assert sorted(p.name for p in kept.parent.iterdir()) == ["r1"]  # no staging folder left behind


def test_a_run_that_wrote_no_memory_keeps_an_empty_one(tmp_path: Path) -> None:
    """A passing run whose agent never made a memory folder leaves an empty kept memory, not an error."""
    tuning = Store(tmp_path / "store").tuning("t1")
    kept = tuning.submit_memory("c1", 1, tmp_path / "run-1" / "memory")
    assert kept.is_dir() and not any(kept.iterdir())


def test_the_walk_finds_each_cases_newest_unfinished_rev_in_bounded_memory(tmp_path: Path) -> None:
    """The daemon walks every case folder every reconciliation: `unfinished()` gives the newest revision
    of each case that has no result, in case order, and its memory peak stays near the folder names' own
    size (at most 400 bytes a case for 3,000 cases; a walk that held every case's object to its end
    peaked near 1,000), so the daemon's RSS does not follow the store's size."""
    tuning = Store(tmp_path / "store").tuning("t1")
    count = 3000
    for n in range(count):
        revs = (1, 2) if n % 10 == 0 else (1,)
        for rev in revs:
            folder = tuning.cases_dir / f"c{n:05d}" / f"r{rev}"
            folder.mkdir(parents=True)
            # two cases in three ended; an older rev always did, which does not end the newest
            if rev < revs[-1] or n % 3:
                (folder / "result.json").write_text("{}")
    (tuning.cases_dir / "no-rev").mkdir()
    tracemalloc.start()
    try:
        unfinished = tuning.unfinished()
        _, peak_b = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(c.case_id, c.rev) for c in unfinished] == [
        (f"c{n:05d}", 2 if n % 10 == 0 else 1) for n in range(count) if n % 3 == 0
    ]
    assert peak_b / count <= 400, peak_b
    assert [c.rev for c in tuning.unfinished("c00000")] == [2] and tuning.unfinished("c00001") == []
    assert tuning.unfinished("missing") == [] and tuning.revs("c00010") == [1, 2]
