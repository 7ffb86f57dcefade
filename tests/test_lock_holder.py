"""Status names the improvements lock's holder from the moment of the grant: the lock keeps the job id
it was granted to beside its token, so no window shows a holder nobody can name. The grant also reads
the version it is made on, so an apply asks Redis nothing more before its applier starts."""

from __future__ import annotations

from redis.asyncio import Redis

from service.client.queries import fleet_status
from service.core import keys
from service.core.models.status import RunningCase
from service.core.settings import FleetSettings
from workers.lock import ImprovementsLock


async def test_the_holder_is_named_before_its_apply_notes_the_lock(settings: FleetSettings) -> None:
    """An apply granted the lock whose running entry still says it waits for the lock (its note goes out
    with its next event) is shown as the holder; the name goes with the lock when it is released."""
    redis = Redis.from_url(settings.redis_url)
    job_id = "case:t1:c1:1"
    waiting = RunningCase(
        case="c1", rev=1, worker="w1", step="apply", phase="nomem", attempt=1, waiting="lock"
    )
    try:
        await redis.sadd(keys.tunings(), "t1")
        await redis.hset(keys.running("t1"), job_id, waiting.model_dump_json())
        lock = ImprovementsLock(redis, "t1", lease_s=3.0)
        hold = await lock.try_acquire(job_id)
        assert hold is not None
        [t1] = (await fleet_status(redis, settings.queue)).tunings
        assert t1.lock.fence == hold.token
        assert t1.lock.holder is not None
        assert (t1.lock.holder.case, t1.lock.holder.worker) == ("c1", "w1")
        assert await lock.release(hold, job_id)
        assert not await redis.exists(keys.lock_holder("t1"))
        [t1] = (await fleet_status(redis, settings.queue)).tunings
        assert (t1.lock.fence, t1.lock.holder) == (None, None)
    finally:
        await redis.aclose()


async def test_a_grant_reads_the_version_it_is_granted_on(settings: FleetSettings) -> None:
    """The lock's grant carries the tuning's version pointer as it was at that moment (None while no
    version was published), and a holder refused the lock is given neither."""
    redis = Redis.from_url(settings.redis_url)
    lock = ImprovementsLock(redis, "t1", lease_s=3.0)
    try:
        first = await lock.try_acquire("case:t1:c1:1")
        assert first is not None and first.version_at_grant is None
        await first.publish("v2", base="v1")
        assert await lock.try_acquire("case:t1:c2:1") is None
        assert await lock.release(first, "case:t1:c1:1")
        second = await lock.try_acquire("case:t1:c2:1")
        assert second is not None and second.version_at_grant == b"v2"
    finally:
        await redis.aclose()
