"""The store's memory keeping: what a completed case's memory folder holds."""

from __future__ import annotations

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
