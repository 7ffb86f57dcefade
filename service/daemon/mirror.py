"""The mirror: the daemon pushes each tuning's current version to the tuning's own `remote`.

Workers publish versions and never push: a push to someone else's server can hang, and must not
hold the improvements lock. At start and then every `mirror_retry_s`, the daemon compares each
tuning's current version (`tf:version:<tuning>`, else the repository's `main`) with the last one it
pushed (`tf:mirror:<tuning>`, a `MirrorState`); when they differ it runs
`git push --force <remote> <version>:refs/heads/<remote_branch>`, ended after `mirror_timeout_s`,
and records the outcome: the version pushed, or the error (credentials masked) and since when the
pushes fail. A failed push is tried again at the next round; the store's repository stays the
source of truth whatever the remote holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import SystemRepoError, TunefleetError
from service.core.io.git import mask_credentials
from service.core.models.status import MirrorState
from service.core.settings import FleetSettings
from service.core.store import Store, TuningStore
from service.core.system import SystemRepo

log = structlog.get_logger()

ERROR_CHARS = 400
"""How much of a failed push's message is kept (its end: git's own words come last)."""


def short_error(message: str) -> str:
    """A failed push's message on one line, credentials masked, at most ERROR_CHARS long."""
    text = " ".join(mask_credentials(message).split())
    return text if len(text) <= ERROR_CHARS else "…" + text[-(ERROR_CHARS - 1) :]


class Mirror:
    """The daemon's periodic push of every tuning's current version to the tuning's remote."""

    def __init__(self, redis: Redis, store: Store, settings: FleetSettings) -> None:
        self.redis = redis
        self.store = store
        self.settings = settings

    async def run(self, stopping: asyncio.Event) -> None:
        """A round at once, then one every `mirror_retry_s`, until `stopping` is set (or cancelled)."""
        while not stopping.is_set():
            try:
                await self.push_all()
            except OSError as exc:  # the store cannot be listed: try again next round
                log.warning("mirror_round_failed", error=short_error(str(exc)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.mirror_retry_s):
                    await stopping.wait()

    async def push_all(self) -> dict[str, MirrorState]:
        """One round over the registered tunings, side by side; the state of each that has a remote."""
        names = self.store.tuning_names()
        states = await asyncio.gather(*(self._push_logged(name) for name in names))
        return {name: state for name, state in zip(names, states, strict=True) if state is not None}

    async def _push_logged(self, name: str) -> MirrorState | None:
        try:
            return await self.push(self.store.tuning(name))
        except (OSError, RedisError, TunefleetError) as exc:  # a failed push itself is a state, not this
            log.warning("mirror_round_failed", tuning=name, error=short_error(str(exc)))
            return None

    async def push(self, tuning: TuningStore) -> MirrorState | None:
        """Push the tuning's current version to its remote unless it is there already; the state
        recorded (None: the tuning has no remote, and any state of an earlier remote is dropped)."""
        config = tuning.config()
        key = keys.mirror(tuning.name)
        if config.remote is None:
            await self.redis.delete(key)
            return None
        repo = SystemRepo(tuning.repo, tuning.snapshots, self.settings.git_timeout_s)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.version(tuning.name))
            pipe.hgetall(key)
            current, raw_state = await pipe.execute()
        version = current.decode() if current is not None else await repo.head()
        remote = mask_credentials(config.remote)
        last = MirrorState.from_hash(raw_state)
        if last is not None and (last.remote, last.branch) != (remote, config.remote_branch):
            last = None  # another remote or branch: what was pushed before says nothing about it
        if last is not None and last.error is None and last.version == version:
            return last
        pushing = log.bind(tuning=tuning.name, remote=remote, branch=config.remote_branch, version=version)
        try:
            await repo.mirror(config.remote, config.remote_branch, version, self.settings.mirror_timeout_s)
        except SystemRepoError as exc:
            state = self._failed(remote, config.remote_branch, last, await self._now(), short_error(str(exc)))
            pushing.warning("mirror_failed", attempts=state.attempts, error=state.error)
        else:
            now = await self._now()
            state = MirrorState(
                remote=remote, branch=config.remote_branch, version=version, pushed_at=now, at=now
            )
            pushing.info("mirror_pushed")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=state.to_hash())
            await pipe.execute()
        return state

    @staticmethod
    def _failed(remote: str, branch: str, last: MirrorState | None, now: datetime, error: str) -> MirrorState:
        """The state after a failed push: what was pushed before stays, the failures are counted."""
        failing = last if last is not None and last.error is not None else None
        return MirrorState(
            remote=remote,
            branch=branch,
            version=last.version if last else None,
            pushed_at=last.pushed_at if last else None,
            error=error,
            failing_since=failing.failing_since if failing else now,
            at=now,
            attempts=(failing.attempts if failing else 0) + 1,
        )

    async def _now(self) -> datetime:
        """Redis's clock: one clock for every process that writes the fleet's state."""
        seconds, micros = await self.redis.time()
        return datetime.fromtimestamp(seconds + micros / 1_000_000, UTC)
