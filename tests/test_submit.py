"""Batched submission: a folder goes in with a few round trips, and a second time adds nothing."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.fleet import Fleet, case, write_tuning
from tests.support.redis_server import RedisServer


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
