"""Serving a Starlette app with uvicorn inside a fleet process's own event loop: the listening socket
(bound first, so a busy port fails before anything else is done) and a server that leaves signals to
its host process. The worker's health endpoints and the daemon's API both serve through this."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from service.core.errors import TunefleetError


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host process (the host stops it by `should_exit`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(host: str, port: int, what: str, backlog: int = 2048) -> socket.socket:
    """A bound, listening TCP socket, or a TunefleetError that says which address `what` was refused.

    The socket names its protocol (TCP), as one that uvicorn binds itself does: asyncio turns Nagle's
    algorithm off only on the connections of such a socket. On a protocol-0 socket (what
    `socket.create_server` makes) every answer on a kept-alive connection (a scraper's, the dashboard's,
    the client's) waited for the peer's delayed ACK of its headers before its body left: 40 ms more."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise TunefleetError(f"{what} cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock
