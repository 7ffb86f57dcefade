"""rediss://: a real redis-server that speaks only TLS (with a CA and certificates made by openssl for the
test) and checks its clients' certificates; a real worker runs a case over it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.core.errors import RedisUnavailableError
from service.core.io.connection import connect
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, write_tuning
from tests.support.redis_proc import RedisProcess
from tests.support.redis_server import free_port
from tests.support.tools import needs_tool

pytestmark = needs_tool("openssl")
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def make_pki(folder: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    folder.mkdir(parents=True)
    openssl(
        folder,
        "req",
        "-x509",
        *EC_KEY,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
    )
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        (folder / f"{name}.ext").write_text(ext + "\n")
        openssl(
            folder, "req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"
        )
        openssl(
            folder,
            *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"),
            *("-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext"),
        )
    return folder


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[RedisProcess, Path]]:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    args = ["--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--tls-cert-file", str(pki / "server.crt"), "--tls-key-file", str(pki / "server.key")]
    args += ["--tls-ca-cert-file", str(pki / "ca.crt")]
    server = RedisProcess(tmp_path / "redis-tls", port, args)
    server.start()
    yield server, pki
    server.stop()


def tls_settings(base: FleetSettings, server: RedisProcess, pki: Path) -> FleetSettings:
    return base.model_copy(
        update={
            "redis_url": f"rediss://127.0.0.1:{server.port}/0",
            "redis_tls_ca_file": pki / "ca.crt",
            "redis_tls_cert_file": pki / "client.crt",
            "redis_tls_key_file": pki / "client.key",
        }
    )


async def test_a_worker_runs_a_case_over_tls(
    tls_redis: tuple[RedisProcess, Path], settings: FleetSettings, tmp_path: Path
) -> None:
    """With rediss:// and the CA and client certificate settings, the daemon's start and a real worker take
    a case with an apply to its end over TLS."""
    server, pki = tls_redis
    fleet = Fleet(tls_settings(settings, server, pki), tmp_path / "logs")
    try:
        await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1", rules=["c1-a"])]))
        fleet.start_worker()
        rows = await fleet.wait_finished(1, timeout_s=30)
    finally:
        fleet.teardown()
    assert (rows["c1"].state, rows["c1"].reason) == ("completed", None)


async def test_tls_refuses_an_unknown_server_and_a_client_without_a_certificate(
    tls_redis: tuple[RedisProcess, Path], settings: FleetSettings
) -> None:
    """Without our CA the server's certificate is not trusted, and without a client certificate the server
    refuses the client: both fail at connect with the URL named."""
    server, pki = tls_redis
    good = tls_settings(settings, server, pki).model_copy(update={"redis_connect_attempts": 1})
    for update in ({"redis_tls_ca_file": None}, {"redis_tls_cert_file": None, "redis_tls_key_file": None}):
        with pytest.raises(RedisUnavailableError, match=f"rediss://127.0.0.1:{server.port}/0"):
            await connect(good.model_copy(update=update))
    redis = await connect(good)
    try:
        assert await redis.ping()
    finally:
        await redis.aclose()
