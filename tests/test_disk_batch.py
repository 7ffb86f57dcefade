"""The group commit of durable writes (service/core/disk_batch.py): each write lands whole under its name
or not at all, flushed together with the writes of the same moment, on the real filesystem."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.core.disk_batch import DiskBatch


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


async def test_a_burst_of_writes_lands_whole_with_one_flush(tmp_path: Path) -> None:
    """Fifty writes made in one loop turn are each whole under their name when awaited, with no temp file
    left, after a single flush; a write alone later has a flush of its own."""
    disk = DiskBatch()
    paths = [tmp_path / f"cases/c{i}/run.json" for i in range(50)]
    await asyncio.gather(*(disk.write(p, f'{{"n": {i}}}\n'.encode()) for i, p in enumerate(paths)))
    burst = disk.flushes
    await disk.write(paths[0], b'{"n": "again"}\n')
    assert [p.read_text() for p in paths[1:]] == [f'{{"n": {i}}}\n' for i in range(1, 50)]
    assert paths[0].read_text() == '{"n": "again"}\n'
    assert (burst, disk.flushes) == (1, 2)
    assert all(leftovers(p.parent) == [] for p in paths)


async def test_a_cancelled_writer_still_lands_its_write_before_the_cancellation(tmp_path: Path) -> None:
    """A case cancelled while its record is being flushed sees the cancellation only once the record is
    in place, as with a synchronous write: no half-done record is left for the next owner to meet."""
    disk = DiskBatch()
    target = tmp_path / "feedback.json"
    task = asyncio.create_task(disk.write(target, b"{}\n"))
    await asyncio.sleep(0)  # the write is queued; its flush has not ended
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.read_bytes() == b"{}\n" and leftovers(tmp_path) == []


async def test_a_write_that_cannot_take_its_name_fails_alone(tmp_path: Path) -> None:
    """A write whose path turned into a folder meanwhile fails with OSError to its own caller, leaving no
    temp file; the other writes of its batch land."""
    disk = DiskBatch()
    blocked = tmp_path / "result.json"
    write = asyncio.gather(
        disk.write(blocked, b"{}\n"), disk.write(tmp_path / "ok.json", b"{}\n"), return_exceptions=True
    )
    blocked.mkdir()
    (blocked / "keep").write_text("")  # a folder that is not empty cannot be replaced by a file
    failed, ok = await write
    assert isinstance(failed, OSError) and ok is None
    assert (tmp_path / "ok.json").read_bytes() == b"{}\n" and leftovers(tmp_path) == []


async def test_a_record_lands_after_its_files_for_people_and_never_without_them(tmp_path: Path) -> None:
    """A record written with `also` files (an analysis's report) has them in place when it lands; when one
    of them cannot be written, the record is not written either and its caller gets the OSError."""
    disk = DiskBatch()
    report, record = tmp_path / "analysis.md", tmp_path / "feedback.json"
    await disk.write(record, b"{}\n", [(report, b"# Analysis\n")])
    assert (report.read_bytes(), record.read_bytes()) == (b"# Analysis\n", b"{}\n")
    blocked, second = tmp_path / "blocked.md", tmp_path / "second.json"
    blocked.mkdir()
    (blocked / "keep").write_text("")  # a folder that is not empty cannot be replaced by a file
    with pytest.raises(OSError):
        await disk.write(second, b"{}\n", [(blocked, b"# Analysis\n")])
    assert not second.exists() and leftovers(tmp_path) == []
