"""The group commit of durable writes (service/core/io/disk_batch.py): each write lands whole under its name
or not at all, flushed together with the writes of the same moment by a real writer process
(service/core/io/durable.py), on the real filesystem; the writer survives what it must and never outlives
its parent."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from service.core.io import durable
from service.core.io.disk_batch import WRITER_STARTS, DiskBatch


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def writer_of(disk: DiskBatch) -> int:
    assert disk.writer_pid is not None
    return disk.writer_pid


async def test_a_burst_of_writes_lands_whole_with_one_flush(tmp_path: Path) -> None:
    """Fifty writes made in one loop turn are each whole under their name when awaited, with no temp file
    left, after a single flush; a write alone later has a flush of its own."""
    async with DiskBatch() as disk:
        paths = [tmp_path / f"cases/c{i}/run.json" for i in range(50)]
        await asyncio.gather(*(disk.write(p, f'{{"n": {i}}}\n'.encode()) for i, p in enumerate(paths)))
        burst = disk.flushes
        await disk.write(paths[0], b'{"n": "again"}\n')
    assert [p.read_text() for p in paths[1:]] == [f'{{"n": {i}}}\n' for i in range(1, 50)]
    assert paths[0].read_text() == '{"n": "again"}\n'
    assert (burst, disk.flushes) == (1, 2)
    assert all(leftovers(p.parent) == [] for p in paths)


async def test_writes_to_one_path_in_one_batch_land_in_their_order(tmp_path: Path) -> None:
    """Twenty writes to the same file queued in one loop turn, among writes to other files, leave the
    last one in place: the writer's threads never reorder the writes of one path."""
    async with DiskBatch() as disk:
        target = tmp_path / "state.json"
        writes = []
        for i in range(20):
            writes.append(disk.write(target, f"{i}\n".encode()))
            writes.append(disk.write(tmp_path / f"other-{i}.json", b"{}\n"))
        await asyncio.gather(*writes)
        assert disk.flushes == 1
    assert target.read_text() == "19\n" and leftovers(tmp_path) == []


async def test_a_cancelled_writer_still_lands_its_write_before_the_cancellation(tmp_path: Path) -> None:
    """A case cancelled while its record is being flushed sees the cancellation only once the record is
    in place, as with a synchronous write: no half-done record is left for the next owner to meet."""
    async with DiskBatch() as disk:
        target = tmp_path / "feedback.json"
        task = asyncio.create_task(disk.write(target, b"{}\n"))
        await asyncio.sleep(0)  # the write is queued; its flush has not ended
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert target.read_bytes() == b"{}\n" and leftovers(tmp_path) == []


async def test_a_write_that_cannot_take_its_name_fails_alone(tmp_path: Path) -> None:
    """A write whose path turned into a folder meanwhile fails with OSError (its errno and its path) to
    its own caller, leaving no temp file; the other writes of its batch land."""
    async with DiskBatch() as disk:
        blocked = tmp_path / "result.json"
        write = asyncio.gather(
            disk.write(blocked, b"{}\n"), disk.write(tmp_path / "ok.json", b"{}\n"), return_exceptions=True
        )
        blocked.mkdir()
        (blocked / "keep").write_text("")  # a folder that is not empty cannot be replaced by a file
        failed, ok = await write
    assert isinstance(failed, IsADirectoryError) and failed.filename == str(blocked) and ok is None
    assert (tmp_path / "ok.json").read_bytes() == b"{}\n" and leftovers(tmp_path) == []


async def test_a_record_lands_after_its_files_for_people_and_never_without_them(tmp_path: Path) -> None:
    """A record written with `also` files (an analysis's report) has them in place when it lands; when one
    of them cannot be written, the record is not written either and its caller gets the OSError."""
    async with DiskBatch() as disk:
        report, record = tmp_path / "analysis.md", tmp_path / "feedback.json"
        await disk.write(record, b"{}\n", [(report, b"# Analysis\n")])
        assert (report.read_bytes(), record.read_bytes()) == (b"# Analysis\n", b"{}\n")
        blocked, second = tmp_path / "blocked.md", tmp_path / "second.json"
        blocked.mkdir()
        (blocked / "keep").write_text("")  # a folder that is not empty cannot be replaced by a file
        with pytest.raises(IsADirectoryError) as failed:
            await disk.write(second, b"{}\n", [(blocked, b"# Analysis\n")])
        assert failed.value.filename == str(blocked)  # the file that failed, not the record
    assert not second.exists() and leftovers(tmp_path) == []


async def test_a_batch_sent_to_a_writer_killed_with_it_lands_through_a_new_writer(tmp_path: Path) -> None:
    """The writer frozen (SIGSTOP) while a burst of records is on its way to it, then SIGKILLed before it
    could land any: every record lands whole, through a second writer that the batch is sent (again) to,
    and the callers see no error."""
    async with DiskBatch() as disk:
        first = writer_of(disk)
        os.kill(first, signal.SIGSTOP)
        paths = [tmp_path / f"c{i}/run.json" for i in range(30)]
        writes = asyncio.gather(*(disk.write(p, f"{i}\n".encode()) for i, p in enumerate(paths)))
        await asyncio.sleep(0)  # the writes are queued; their batch leaves now or on a turn soon
        os.kill(first, signal.SIGKILL)
        await writes
        assert disk.writers_started == 2 and writer_of(disk) != first
    assert [p.read_text() for p in paths] == [f"{i}\n" for i in range(30)]


async def test_writers_that_die_before_answering_fail_every_write_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer processes that exit before landing anything (a broken interpreter, say): after WRITER_STARTS
    of them in a row, each write of the batch fails with an OSError that says so, nothing is written,
    and the next write starts a writer again."""
    dying = tmp_path / "dying.py"
    dying.write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(durable, "__file__", str(dying))
    disk = DiskBatch()
    try:
        paths = [tmp_path / f"c{i}/run.json" for i in range(3)]
        results = await asyncio.gather(*(disk.write(p, b"{}\n") for p in paths), return_exceptions=True)
        assert all(isinstance(r, OSError) and "ended before landing" in str(r) for r in results), results
        assert disk.writers_started == WRITER_STARTS
        assert not any(p.exists() for p in paths)
        monkeypatch.undo()
        await disk.write(paths[0], b"{}\n")
        assert paths[0].read_text() == "{}\n" and disk.writers_started == WRITER_STARTS + 1
    finally:
        await disk.aclose()  # the writer started last, if any


async def test_the_writer_ignores_a_termination_sent_to_the_process_group(tmp_path: Path) -> None:
    """SIGTERM and SIGINT (what a terminal or a supervisor sends to a whole process group) leave the
    writer running: the worker lands its last records while it hands its cases back."""
    async with DiskBatch() as disk:
        await disk.write(tmp_path / "a.json", b"{}\n")  # the writer is past its start: its handlers are set
        pid = writer_of(disk)
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)
        await disk.write(tmp_path / "b.json", b"{}\n")
        assert disk.writers_started == 1 and writer_of(disk) == pid
    assert (tmp_path / "b.json").read_bytes() == b"{}\n"


async def test_the_writer_holds_no_environment_and_no_descriptor_but_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer starts with an empty environment (the worker's holds the Redis password and the meta
    agent's key) and with no open file but its standard streams and its socket."""
    monkeypatch.setenv("TUNEFLEET_REDIS_PASSWORD", "hunter2")
    async with DiskBatch() as disk:
        await disk.write(tmp_path / "a.json", b"{}\n")
        pid = writer_of(disk)
        environment = Path(f"/proc/{pid}/environ").read_bytes()
        sockets = [
            fd.name
            for fd in Path(f"/proc/{pid}/fd").iterdir()
            if int(fd.name) > 2 and "socket:" in os.readlink(fd)
        ]
        others = [
            fd.name for fd in Path(f"/proc/{pid}/fd").iterdir() if int(fd.name) > 2 and fd.name not in sockets
        ]
    assert environment == b"" and len(sockets) == 1, (environment, sockets)
    assert others == [], [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in others]


async def test_closing_the_batch_ends_its_writer(tmp_path: Path) -> None:
    """`aclose` returns once the writer has left and is reaped (its pid is gone); a batch closed twice
    closes once."""
    disk = DiskBatch()
    await disk.write(tmp_path / "a.json", b"{}\n")
    pid = writer_of(disk)
    await disk.aclose()
    await disk.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert disk.writer_pid is None


PARENT = """
import asyncio, sys
from pathlib import Path
from service.core.io.disk_batch import DiskBatch

async def main() -> None:
    disk = DiskBatch()
    await disk.write(Path(sys.argv[1]), b"{}\\n")
    print(disk.writer_pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_the_writer_leaves_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A worker SIGKILLed leaves no writer behind: the writer sees its socket close and exits (waited for
    on a pidfd, no polling)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "a.json")], stdout=subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        assert parent.stdout is not None
        writer = int(parent.stdout.readline())
        pidfd = os.pidfd_open(writer)
    finally:
        parent.kill()
        parent.wait()
    try:
        ready, _, _ = select.select([pidfd], [], [], 30)
    finally:
        os.close(pidfd)
    assert ready == [pidfd], "the writer outlived its killed parent"
    assert (tmp_path / "a.json").read_bytes() == b"{}\n"
