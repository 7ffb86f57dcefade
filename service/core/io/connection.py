"""Connecting to Redis: URL, AUTH, TLS and Sentinel from the settings, with a retry policy."""

from __future__ import annotations

import asyncio
import math
from typing import Any, cast

import structlog
from arq.connections import ArqRedis, RedisSettings, create_pool
from redis._parsers.hiredis import NOT_ENOUGH_DATA as HIREDIS_NOT_ENOUGH_DATA
from redis._parsers.hiredis import _AsyncHiredisParser
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.utils import HIREDIS_AVAILABLE
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from service.core.errors import RedisUnavailableError
from service.core.models.jobs import dump_job, load_job
from service.core.settings import FleetSettings

log = structlog.get_logger()

COMMAND_RETRIES = 3
JOB_EXPIRY_MS = 365 * 24 * 3600 * 1000
"""A queued case may wait for weeks; arq's default (a day) would drop it as expired."""


def _worth_retrying(exc: BaseException) -> bool:
    """Network trouble is retried; refused credentials are not (they would be refused again)."""
    transient = isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError)
    return transient and not isinstance(exc, AuthenticationError)


def redis_settings(settings: FleetSettings) -> RedisSettings:
    """arq's connection settings from ours (the password never leaves its SecretStr until here)."""
    base = RedisSettings.from_dsn(settings.redis_url)
    if settings.redis_password is not None:
        base.password = settings.redis_password.get_secret_value()
    if settings.redis_tls_ca_file is not None:
        base.ssl_ca_certs = str(settings.redis_tls_ca_file)
    if settings.redis_tls_cert_file is not None:
        base.ssl_certfile = str(settings.redis_tls_cert_file)
    if settings.redis_tls_key_file is not None:
        base.ssl_keyfile = str(settings.redis_tls_key_file)
    if settings.redis_sentinels:
        hosts = []
        for entry in settings.redis_sentinels:
            host, _, port = entry.rpartition(":")
            hosts.append((host, int(port)))
        base.host = hosts
        base.sentinel = True
        base.sentinel_master = settings.redis_sentinel_master
    base.conn_timeout = max(1, round(settings.redis_connect_timeout_s))
    base.conn_retries = 0
    # A command that meets a dropped connection (Redis restarted) is tried again on a new one.
    base.retry_on_error = [RedisConnectionError]
    base.retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), COMMAND_RETRIES)
    return base


async def connect(settings: FleetSettings) -> ArqRedis:
    """An arq pool, retried with jittered exponential backoff, or RedisUnavailableError."""
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(settings.redis_connect_attempts),
            wait=wait_random_exponential(multiplier=0.2, max=5.0),
            retry=retry_if_exception(_worth_retrying),
            reraise=True,
        ):
            with attempt:
                n = attempt.retry_state.attempt_number
                if n > 1:
                    log.warning("redis_connect_retry", attempt=n)
                if settings.redis_sentinels:
                    return await _packing_in_c(await _sentinel_pool(settings))
                return await _packing_in_c(
                    await create_pool(
                        redis_settings(settings),
                        retry=0,
                        job_serializer=dump_job,
                        job_deserializer=load_job,
                        default_queue_name=settings.queue,
                        expires_extra_ms=JOB_EXPIRY_MS,
                    )
                )
    except AuthenticationError as exc:
        raise RedisUnavailableError(
            f"Redis at {safe_url(settings.redis_url)} refused the credentials: "
            "check TUNEFLEET_REDIS_PASSWORD or the URL's user and password"
        ) from exc
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"Redis at {safe_url(settings.redis_url)} unreachable after "
            f"{settings.redis_connect_attempts} attempts: {exc}"
        ) from exc
    raise AssertionError("unreachable")


class _HiredisConnection:
    """A pool's connection made leaner where hiredis is installed (mixed into the pool's own class).

    Commands are packed by hiredis, in C, as redis-py's synchronous client does by default. Its asyncio
    client (5.x, the series arq allows) packs them in Python, argument by argument: in a busy worker,
    where every event is a script call of a dozen arguments, that was the largest share of the event
    loop's own CPU after the kernel's (docs/benchmarks.md, "The case loop's waits").

    Before it hands a connection out, the pool asks whether a reply is waiting on it (one left unread
    would answer the next caller's command). redis-py asks by reading under a zero timeout: a task
    cancelled and a turn of the event loop, at every round trip of the process, about a sixth of a
    round trip's CPU. What the loop has received sits in the connection's stream already, so this looks
    there (and at the reader's own buffer, as redis-py does) without waiting: a reply or any byte waiting
    answers yes, a connection the server closed raises, as a read would have."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        return cast(list[bytes], self._packer.pack(*args))

    async def can_read_destructive(self) -> bool:
        parser = cast(Any, self)._parser
        stream: asyncio.StreamReader | None = getattr(parser, "_stream", None)
        waiting = getattr(stream, "_buffer", None)
        if not isinstance(parser, _AsyncHiredisParser) or stream is None or waiting is None:
            return cast(bool, await cast(Any, super()).can_read_destructive())
        if not parser._connected:
            raise RedisConnectionError("the connection is closed")
        reader = cast(Any, parser._reader)
        if reader.gets() is not HIREDIS_NOT_ENOUGH_DATA or waiting:
            return True
        if stream.at_eof():
            raise RedisConnectionError("the server closed the connection")
        return False


async def _packing_in_c(pool: ArqRedis) -> ArqRedis:
    """The pool, its connections from now on `_HiredisConnection`s (where hiredis is installed); the one
    its first ping opened is closed and dropped, so that every connection is one."""
    connections = pool.connection_pool
    base = connections.connection_class
    if HIREDIS_AVAILABLE and not issubclass(base, _HiredisConnection):
        lean = type(f"Hiredis{base.__name__}", (_HiredisConnection, base), {})
        connections.connection_class = cast(type[AbstractConnection], lean)
        await connections.disconnect()
        connections.reset()  # type: ignore[no-untyped-call]  # forgets the connection made before
    return pool


async def _sentinel_pool(settings: FleetSettings) -> ArqRedis:
    """The primary's pool through the Sentinels. Unlike arq's, its commands ride out a failover: one that
    meets the dead primary is retried (on a connection to whatever primary the Sentinels name then) for
    about `redis_failover_wait_s`, so that work under way carries on once a replica is promoted."""
    base = redis_settings(settings)
    tls: dict[str, Any] = {}
    if base.ssl:
        tls = {"ssl": True, "ssl_ca_certs": base.ssl_ca_certs, "ssl_certfile": base.ssl_certfile}
        tls["ssl_keyfile"] = base.ssl_keyfile
    # Backoff 0.1, 0.2, 0.4, 0.8 s, then 1 s per retry (the cap): the retries that span the wait.
    retries = 4 + math.ceil(max(0.0, settings.redis_failover_wait_s - 1.5))
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        base.host,
        socket_connect_timeout=base.conn_timeout,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        retry_on_error=[RedisConnectionError],
        db=base.database,
        username=base.username,
        password=base.password,
        encoding="utf8",
        **tls,
    )
    pool: ArqRedis = sentinel.master_for(settings.redis_sentinel_master, redis_class=ArqRedis)
    pool.job_serializer = dump_job
    pool.job_deserializer = load_job
    pool.default_queue_name = settings.queue
    pool.expires_extra_ms = JOB_EXPIRY_MS
    try:
        # At start a Sentinel that names no primary is an error now, not after the failover wait.
        async with asyncio.timeout(max(1.0, settings.redis_connect_timeout_s)):
            await pool.ping()
    except BaseException:
        await pool.aclose()
        raise
    return pool


def safe_url(url: str) -> str:
    """The URL with any password replaced, fit for logs and messages."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if user else f"{scheme}{sep}***@{host}"
