"""A Redis outage in a worker's log: one line when it begins, one when it ends, nothing in between."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from service.core import keys
from tests.support.fleet import Fleet, wait_until
from tests.support.redis_server import RedisServer

OUTAGE_S = 4.0
"""How long Redis stays down: twenty polls, two presence beats, more than one backoff cap."""


def log_events(fleet: Fleet) -> list[dict[str, Any]]:
    events = []
    for line in fleet.log_of(0).splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": line, "level": "unparsed"})
    return events


async def test_a_redis_outage_is_logged_once_and_its_end_once(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    """Redis stopped for 4 s under an idle worker: the worker logs `redis_unreachable` once and
    `redis_reachable` once, and no other warning, while its polls back off; then it claims again."""
    fleet.start_worker(concurrency=2)
    await wait_until(lambda: any(e["event"] == "worker_started" for e in log_events(fleet)), 30, "the worker")
    name = next(str(e["worker"]) for e in log_events(fleet) if e["event"] == "worker_started")
    with redis_server.client() as r:
        await wait_until(lambda: r.hexists(keys.free_slots(), name), 30, "the worker polling")
    before = len(log_events(fleet))
    redis_server.stop()
    await asyncio.sleep(OUTAGE_S)  # the fault itself: Redis stays down this long
    redis_server.start()
    await wait_until(
        lambda: any(e["event"] == "redis_reachable" for e in log_events(fleet)), 30, "the outage's end logged"
    )
    with redis_server.client() as r:
        await wait_until(lambda: r.hexists(keys.free_slots(), name), 30, "the worker polling again")
    during = log_events(fleet)[before:]
    kinds = [e["event"] for e in during]
    assert kinds.count("redis_unreachable") == 1 and kinds.count("redis_reachable") == 1, kinds
    assert [e for e in during if e["event"] not in {"redis_unreachable", "redis_reachable"}] == [], kinds
    reachable = next(e for e in during if e["event"] == "redis_reachable")
    assert reachable["down_s"] >= OUTAGE_S - 1
