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
    left: the first lands on the event loop, the other 49 in a single flush; a write alone later lands on
    the loop too (however slowly the disk took the first ones: this test is not about that bound)."""
    disk = DiskBatch(inline_below_ms=float("inf"))
    paths = [tmp_path / f"cases/c{i}/run.json" for i in range(50)]
    await asyncio.gather(*(disk.write(p, f'{{"n": {i}}}\n'.encode()) for i, p in enumerate(paths)))
    burst = (disk.inline, disk.flushes)
    await disk.write(paths[0], b'{"n": "again"}\n')
    assert [p.read_text() for p in paths[1:]] == [f'{{"n": {i}}}\n' for i in range(1, 50)]
    assert paths[0].read_text() == '{"n": "again"}\n'
    assert burst == (1, 1) and (disk.inline, disk.flushes) == (2, 1)
    assert all(leftovers(p.parent) == [] for p in paths)


async def test_a_lone_write_goes_to_a_thread_once_writes_land_slowly(tmp_path: Path) -> None:
    """A lone write lands on the event loop only while the writes' moving average stays under the bound:
    past it (here a bound no real write meets), the next lone write is flushed in a thread, and lands
    whole all the same."""
    disk = DiskBatch(inline_below_ms=1e-9)
    await disk.write(tmp_path / "first.json", b"{}\n")
    await asyncio.sleep(0)  # the next loop turn: the first write's turn is over
    await disk.write(tmp_path / "second.json", b"[]\n")
    assert (disk.inline, disk.flushes) == (1, 1)
    assert (tmp_path / "second.json").read_bytes() == b"[]\n" and leftovers(tmp_path) == []


async def test_a_cancelled_writer_still_lands_its_write_before_the_cancellation(tmp_path: Path) -> None:
    """A case cancelled while its record is being flushed sees the cancellation only once the record is
    in place, as with a synchronous write: no half-done record is left for the next owner to meet."""
    disk = DiskBatch(inline_below_ms=0)  # every write through a flush thread
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
