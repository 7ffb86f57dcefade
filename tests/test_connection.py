"""Connecting to Redis as a fleet would: AUTH, Sentinel, retries, and no secret in any message."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis.asyncio.connection import Connection

from service.core.errors import RedisUnavailableError
from service.core.io.connection import connect, safe_url
from service.core.settings import FleetSettings
from tests.support.fleet import wait_until
from tests.support.redis_server import RedisServer, free_port

SECRET = "s3cret-pass-9412"


@pytest.fixture
def protected(tmp_path: Path) -> RedisServer:
    server = RedisServer(tmp_path / "auth")
    server.start()
    with server.client() as r:
        r.config_set("requirepass", SECRET)
    return server


async def test_auth_with_the_password_setting_connects(protected: RedisServer, tmp_path: Path) -> None:
    """TUNEFLEET_REDIS_PASSWORD is used for AUTH, and the pool answers commands."""
    settings = FleetSettings(redis_url=protected.url, redis_password=SecretStr(SECRET), store=tmp_path)
    redis = await connect(settings)
    try:
        assert await redis.ping()
    finally:
        await redis.aclose()
    protected.stop()


async def test_a_wrong_password_fails_clearly_without_showing_it(
    protected: RedisServer, tmp_path: Path
) -> None:
    """A refused AUTH surfaces as an error that names Redis's address but never the password."""
    url = f"redis://:{SECRET}-wrong@127.0.0.1:{protected.port}/0"
    settings = FleetSettings(redis_url=url, store=tmp_path, redis_connect_attempts=5)
    with pytest.raises(RedisUnavailableError, match="refused the credentials") as caught:
        await connect(settings)
    assert SECRET not in str(caught.value)
    protected.stop()


async def test_an_unreachable_redis_is_retried_then_named(tmp_path: Path) -> None:
    """With nothing listening, connect retries the configured number of times, then says where it tried."""
    port = free_port()
    settings = FleetSettings(
        redis_url=f"redis://user:{SECRET}@127.0.0.1:{port}/0", store=tmp_path, redis_connect_attempts=2
    )
    with pytest.raises(RedisUnavailableError) as caught:
        await connect(settings)
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "after 2 attempts" in message and SECRET not in message


def test_safe_url_masks_the_password() -> None:
    """URLs shown in messages keep the user and host but not the password."""
    assert (
        safe_url(f"rediss://svc:{SECRET}@redis.internal:6380/2") == "rediss://svc:***@redis.internal:6380/2"
    )
    assert safe_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


async def test_sentinel_finds_the_master(tmp_path: Path) -> None:
    """With TUNEFLEET_REDIS_SENTINELS set, the client asks a real Sentinel for the master and uses it."""
    master = RedisServer(tmp_path / "master")
    master.start()
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {master.port} 1\n")
    sentinel = subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
    try:
        settings = FleetSettings(
            redis_sentinels=[f"127.0.0.1:{port}"],
            redis_sentinel_master="mymaster",
            store=tmp_path,
            redis_connect_attempts=20,
        )
        redis = await connect(settings)
        try:
            await redis.set("through-sentinel", "yes")
        finally:
            await redis.aclose()
        assert master.get("through-sentinel") == b"yes"
    finally:
        sentinel.kill()
        sentinel.wait()
        master.stop()


async def test_commands_packed_in_c_carry_every_kind_of_value(settings: FleetSettings) -> None:
    """The pool packs commands with hiredis, and what it sends reaches Redis as redis-py's own packer
    would send it: text (non-ASCII too), bytes, ints, floats, a command name of two words, and a
    pipeline of script calls."""
    redis = await connect(settings)
    try:
        packing = redis.connection_pool.connection_class
        assert packing.__name__.startswith("Hiredis")
        used = await redis.connection_pool.get_connection()  # the one the pool hands out
        try:
            assert type(used) is packing
        finally:
            await redis.connection_pool.release(used)
        args = ("EVALSHA", "ab" * 20, 2, "k1", "k2", "héllo ✓", b"\x00\xff raw", 7, -3, 0.25, 1e-7)
        assert packing().pack_command(*args) == [b"".join(Connection().pack_command(*args))]
        values: dict[str, str | bytes | int | float] = {"text": "héllo ✓", "raw": b"\x00\xff", "n": -42}
        values["x"] = 0.1
        await redis.hset("packed", mapping=values)  # type: ignore[misc]
        got = await redis.hgetall("packed")  # type: ignore[misc]
        assert got == {b"text": "héllo ✓".encode(), b"raw": b"\x00\xff", b"n": b"-42", b"x": b"0.1"}
        assert await redis.execute_command("CONFIG GET", "maxmemory-policy")  # type: ignore[no-untyped-call]
        sha = await redis.script_load("return ARGV[1] .. ARGV[2]")
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(3):
                pipe.evalsha(sha, 0, f"é{i}", str(i))
            assert await pipe.execute() == [f"é{i}{i}".encode() for i in range(3)]
    finally:
        await redis.aclose()


async def test_a_reply_left_on_a_pooled_connection_never_answers_the_next_command(
    settings: FleetSettings,
) -> None:
    """The pool's check for a reply left unread finds one (then the next command runs on a new
    connection, and gets its own answer, not the stale PONG) and finds none without waiting for a turn
    of the event loop: the check of an idle connection returns at its first step."""
    redis = await connect(settings)
    pool = redis.connection_pool
    try:
        await redis.set("mine", "my value")
        idle = await pool.get_connection()
        check = idle.can_read_destructive()
        with pytest.raises(StopIteration) as returned:
            check.send(None)  # redis-py's own check suspends here, for a turn, under a zero timeout
        assert returned.value.value is False
        await idle.send_command("PING")  # its reply is left unread
        await wait_until(idle.can_read_destructive, 10, "the PING's reply", interval_s=0.001)
        await idle.send_command("PING")  # a second one, now in the socket or the stream
        await pool.release(idle)
        assert await redis.get("mine") == b"my value"
        assert await redis.get("mine") == b"my value"
    finally:
        await redis.aclose()
