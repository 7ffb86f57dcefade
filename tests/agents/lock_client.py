"""A real process that uses the improvements lock, for the lock's fault tests.

    lock_client.py hammer HOLDS LOG        print "ready", wait for a line on stdin, then take and release
                                           the lock HOLDS times, holding and pausing for random spans;
                                           append each hold interval (Redis TIME, microseconds) to LOG
    lock_client.py hold                    take the lock, print "holding <token>", then wait for a line on
                                           stdin; on it, try to publish a new version and print the outcome
    lock_client.py edit TEXT               take the lock, commit TEXT to rules.md in a worktree, print
                                           "committed <sha>", wait for a line on stdin, then publish

Settings come from TUNEFLEET_* variables.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from redis.asyncio import Redis

from service.core import keys
from service.core.io.connection import connect
from service.core.settings import FleetSettings
from service.core.store import Store
from service.core.system import SystemRepo
from workers.errors import LockLost
from workers.lock import ImprovementsLock

TUNING = "t1"


async def redis_time_us(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1_000_000 + int(micros)


async def hammer(redis: Redis, lock: ImprovementsLock, holds: int, log: Path) -> None:
    member = f"hammer-{id(lock)}"
    await redis.ping()
    print("ready", flush=True)
    await read_line()
    for _ in range(holds):
        async with lock.held(member):
            began = await redis_time_us(redis)
            await asyncio.sleep(random.uniform(0, 0.01))
            ended = await redis_time_us(redis)
        with log.open("a") as handle:
            handle.write(f"{began} {ended}\n")
        await asyncio.sleep(random.uniform(0, 0.02))


async def read_line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def hold(lock: ImprovementsLock) -> None:
    try:
        async with lock.held("holder") as held:
            print(f"holding {held.token}", flush=True)
            await read_line()
            await held.publish("f" * 40, base="e" * 40)
            print("published", flush=True)
    except LockLost as exc:
        print(f"refused: {exc}", flush=True)


async def edit(redis: Redis, lock: ImprovementsLock, settings: FleetSettings, text: str) -> None:
    tuning = Store(settings.store).tuning(TUNING)
    repo = SystemRepo(tuning.repo, tuning.snapshots)
    try:
        async with lock.held(f"edit-{text}") as held:
            current = (await current_version(redis)) or await repo.head()
            tree = await repo.private_copy(current, tuning.root / "edits" / f"edit-{held.token}")
            (tree / "rules.md").write_text(f"- rule: {text}\n")
            version = await repo.commit_folder(tree, current, f"edit {text}")
            print(f"committed {version}", flush=True)
            await read_line()
            assert version is not None
            await held.publish(version, base=current)
            await repo.update_main(version)
            print("published", flush=True)
    except LockLost as exc:
        print(f"refused: {exc}", flush=True)


async def current_version(redis: Redis) -> str | None:
    value = await redis.get(keys.version(TUNING))
    return value.decode() if value else None


async def main(argv: list[str]) -> None:
    settings = FleetSettings()
    redis = await connect(settings)
    lock = ImprovementsLock(redis, TUNING, settings.lock_lease_s)
    try:
        if argv[0] == "hammer":
            await hammer(redis, lock, int(argv[1]), Path(argv[2]))
        elif argv[0] == "hold":
            await hold(lock)
        elif argv[0] == "edit":
            await edit(redis, lock, settings, argv[1])
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
