"""Batched submission: a folder goes in with a few round trips, each case's file is on disk before its
job is visible, and a second time adds nothing but the re-runs of failed cases."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest
import yaml

from service.client.client import SUBMIT_BATCH
from service.core.errors import StoreError
from service.core.io.files import publish_temps, read_model, write_temp
from service.core.models.case import Case
from service.core.models.records import CaseResult
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, write_tuning
from tests.support.redis_server import RedisServer


def cases_dir(settings: FleetSettings) -> Path:
    return settings.store / "tunings" / "t1" / "cases"


def models(names: list[str]) -> list[Case]:
    return [Case.model_validate(case(name)) for name in names]


def leftovers(settings: FleetSettings) -> list[Path]:
    """Temp files of unfinished atomic writes in the tuning's folder and its case folders."""
    tuning = settings.store / "tunings" / "t1"
    return sorted([*tuning.glob(".*.tmp"), *tuning.glob("cases/*/r*/.*.tmp")])


async def test_a_folder_submitted_twice_is_enqueued_once(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """submit_path enqueues every new case once; submitting the same folder again finds only duplicates."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    folder = tmp_path / "incoming"
    folder.mkdir()
    for i in range(1200):  # more than one batch
        (folder / f"c{i:04d}.yaml").write_text(yaml.safe_dump(case(f"c{i:04d}")))
    async with fleet.client() as client:
        first = await client.submit_path("t1", folder)
        again = await client.submit_path("t1", folder)
        status = await client.status()
    assert len(first.accepted) == 1200 and not first.duplicates and not first.refused
    assert not again.accepted and len(again.duplicates) == 1200
    assert redis_server.zcard(fleet.settings.queue) == 1200
    assert status.tunings[0].submitted == 1200 and status.queue_depth == 1200
    queued = [e for e in fleet.events() if e["kind"] == "case_queued"]
    assert len(queued) == 1200 and {e["case"] for e in queued} == {f"c{i:04d}" for i in range(1200)}
    assert not leftovers(fleet.settings)


async def test_each_case_file_is_whole_under_its_name_before_its_job_is_visible(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A consumer blocked on the queue (BZPOPMIN, as fast as any worker could claim a job) finds the
    case.json of every job it takes already complete under its final name: over several batches whose
    files are written while the batch before is enqueued, and over one-case calls, whose enqueue is
    quickest."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    names = [f"w{i:04d}" for i in range(3 * SUBMIT_BATCH + 7)]
    singles = [f"s{i:02d}" for i in range(30)]
    count = len(names) + len(singles)
    folder = cases_dir(fleet.settings)

    def take_all() -> list[str]:
        """Pop every job as it appears; the problems found with its case file at that moment."""
        problems = []
        with redis_server.client() as redis:
            for _ in range(count):
                popped = cast(tuple[bytes, bytes, float] | None, redis.bzpopmin(fleet.settings.queue, 20))
                assert popped is not None, "a job never appeared"
                name = popped[1].decode().split(":")[2]
                try:
                    stored = read_model(folder / name / "r1" / "case.json", Case)
                except StoreError as exc:
                    problems.append(f"{name}: {exc}")
                    continue
                if stored is None or stored.id != name:
                    problems.append(f"{name}: {stored!r}")
        return problems

    async def submit_all() -> list[bool]:
        async with fleet.client() as client:
            accepted = await client.submit_many("t1", models(names))
            for name in singles:
                accepted += await client.submit_many("t1", models([name]))
        return accepted

    problems, accepted = await asyncio.gather(asyncio.to_thread(take_all), submit_all())
    assert accepted == [True] * count
    assert problems == []
    assert not leftovers(fleet.settings)


async def test_duplicates_are_refused_within_a_call_across_batches_and_across_calls(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """The same (case, rev) twice in one batch, again in a later batch of the same call, and again in a
    second call is accepted once; a new rev of it is a new case."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    names = ["d0", "d0", *[f"f{i:04d}" for i in range(SUBMIT_BATCH)], "d0", "d1"]
    async with fleet.client() as client:
        first = await client.submit_many("t1", models(names))
        again = await client.submit_many("t1", models(["d0", "d1"]))
        newer = await client.submit_many("t1", [models(["d0"])[0].model_copy(update={"rev": 2})])
    assert first[:2] == [True, False] and first[-2:] == [False, True] and all(first[2:-2])
    assert again == [False, False] and newer == [True]
    assert redis_server.zcard(fleet.settings.queue) == SUBMIT_BATCH + 3
    queued = [e["case"] for e in fleet.events() if e["kind"] == "case_queued"]
    assert queued.count("d0") == 2 and queued.count("d1") == 1
    assert sorted(p.name for p in (cases_dir(fleet.settings) / "d0").iterdir()) == ["r1", "r2"]


async def test_what_a_crashed_submission_leaves_does_not_block_the_next(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A submission that died after writing its temp file, or between making the rev's folder and naming
    the file in it, leaves nothing that blocks the next one: the case file is written and the job enqueued."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    stale = cases_dir(fleet.settings) / "half" / "r1"
    stale.mkdir(parents=True)
    (stale.parents[2] / ".case.half.r1.1.1.tmp").write_text("{")  # the tuning folder
    async with fleet.client() as client:
        accepted = await client.submit_many("t1", models(["half"]))
    assert accepted == [True]
    stored = read_model(stale / "case.json", Case)
    assert stored is not None and stored.id == "half"
    assert redis_server.zmembers(fleet.settings.queue) == ["case:t1:half:1"]


async def test_an_unreadable_case_file_fails_the_batch_and_leaves_no_temp_files(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A corrupt case.json stops its batch before anything of it is enqueued or any folder of it is made,
    with no temp file left behind; once the file is removed, the same submission goes through."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    names = [f"b{i:03d}" for i in range(40)]
    corrupt = cases_dir(fleet.settings) / "b020" / "r1" / "case.json"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text("{not json")
    async with fleet.client() as client:
        with pytest.raises(StoreError):
            await client.submit_many("t1", models(names))
        assert redis_server.zcard(fleet.settings.queue) == 0
        assert not leftovers(fleet.settings)
        assert [p.name for p in cases_dir(fleet.settings).iterdir()] == ["b020"]
        corrupt.unlink()
        accepted = await client.submit_many("t1", models(names))
    assert accepted == [True] * len(names)
    assert redis_server.zcard(fleet.settings.queue) == len(names)
    assert [e["kind"] for e in fleet.events()].count("case_queued") == len(names)


async def test_a_failed_case_submitted_again_runs_again_and_a_completed_one_does_not(
    fleet: Fleet, tmp_path: Path
) -> None:
    """After a worker ends one case failed (three void runs) and another completed, submitting both
    again in one batch re-runs the failed one only: its failure is archived and it then completes."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    first = [Case.model_validate(case("flaky", voids={"nomem-1": 3})), *models(["fine"])]
    async with fleet.client() as client:
        assert await client.submit_many("t1", first) == [True, True]
    fleet.start_worker(concurrency=2)
    rows = await fleet.wait_finished(2)
    assert (rows["flaky"].state, rows["fine"].state) == ("failed", "completed")
    async with fleet.client() as client:
        assert await client.submit_many("t1", first) == [True, False]
    requeued = [e["case"] for e in fleet.events() if e["kind"] == "case_requeued"]
    assert requeued == ["flaky"]
    archived = read_model(cases_dir(fleet.settings) / "flaky" / "r1" / "failed-1.json", CaseResult)
    assert archived is not None and archived.state == "failed"
    rows = await fleet.wait_finished(2)
    assert (rows["flaky"].state, rows["fine"].state) == ("completed", "completed")


async def test_published_temp_files_are_whole_under_their_names(tmp_path: Path) -> None:
    """publish_temps gives each temp file begun by write_temp its name, making the missing folders and
    replacing an older file, and leaves no temp file behind; an empty list touches nothing."""
    targets = [tmp_path / "a" / "b" / "x.json", tmp_path / "c" / "y.json"]
    targets[1].parent.mkdir()
    targets[1].write_bytes(b"old")
    temps = [(write_temp(tmp_path, path.name, f"new {i}".encode()), path) for i, path in enumerate(targets)]
    assert not targets[0].parent.exists() and targets[1].read_bytes() == b"old"
    publish_temps(temps, tmp_path)
    publish_temps([], tmp_path / "missing")
    assert [path.read_bytes() for path in targets] == [b"new 0", b"new 1"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "a",
        "a/b",
        "a/b/x.json",
        "c",
        "c/y.json",
    ]


async def test_a_temp_file_that_cannot_take_its_name_leaves_no_temp_file_behind(tmp_path: Path) -> None:
    """When one rename of publish_temps fails, the files named before it stay, and the temp files of it
    and of those after it are removed before the error is raised."""
    (tmp_path / "blocker").write_bytes(b"a file where a folder should be")
    targets = [tmp_path / "a" / "x.json", tmp_path / "blocker" / "y.json", tmp_path / "c" / "z.json"]
    temps = [(write_temp(tmp_path, path.name, path.name.encode()), path) for path in targets]
    with pytest.raises(NotADirectoryError):
        publish_temps(temps, tmp_path)
    assert targets[0].read_bytes() == b"x.json" and not targets[2].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "blocker"]
