"""The fleet's HTTP servers (the API with its dashboard and /metrics, the health endpoints) turn Nagle's
algorithm off on every connection they accept, so an answer on a kept-alive connection leaves at once
instead of waiting for the peer's delayed ACK of its headers (40 ms on Linux)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.core.errors import TunefleetError
from service.core.io.serving import EmbeddedServer, listen


def accepted_socket(peer: tuple[str, int]) -> socket.socket:
    """This process's end of the TCP connection whose other end is `peer` (a duplicate of its fd)."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
            try:
                if sock.type == socket.SOCK_STREAM and sock.getpeername() == peer:
                    return sock
            except OSError:
                pass
            sock.close()
    raise AssertionError(f"no socket of this process is connected to {peer}")


async def test_every_connection_the_fleet_s_servers_accept_has_nagle_off() -> None:
    """Read on the server's own end of each request's connection: TCP_NODELAY is on, for the three
    requests of one kept-alive connection (the case a delayed ACK held up)."""
    seen: list[tuple[tuple[str, int], int]] = []

    async def check(request: Request) -> JSONResponse:
        assert request.client is not None
        peer = (request.client.host, request.client.port)
        with accepted_socket(peer) as own_end:
            seen.append((peer, own_end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
        return JSONResponse({})

    sock = listen("127.0.0.1", 0, "the test server")
    port = sock.getsockname()[1]
    config = uvicorn.Config(Starlette(routes=[Route("/", check)]), log_config=None, lifespan="off")
    server = EmbeddedServer(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(3):
                (await client.get("/")).raise_for_status()
        assert len({peer for peer, _ in seen}) == 1, "the three requests shared one connection"
        assert [bool(nodelay) for _, nodelay in seen] == [True, True, True]
    finally:
        server.should_exit = True
        await serving


def test_a_taken_port_is_refused_with_the_address() -> None:
    """`listen` on a port already taken says which server and address were refused."""
    taken = listen("127.0.0.1", 0, "the first server")
    port = taken.getsockname()[1]
    try:
        with pytest.raises(TunefleetError, match=rf"the second server cannot listen on 127\.0\.0\.1:{port}"):
            listen("127.0.0.1", port, "the second server")
    finally:
        taken.close()
