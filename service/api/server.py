"""Serving the API and dashboard (service.api.app) with uvicorn inside the daemon's event loop."""

from __future__ import annotations

import asyncio
import socket

import structlog
import uvicorn

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core.errors import TunefleetError
from service.core.io import serving
from service.core.io.serving import EmbeddedServer
from service.core.settings import FleetSettings

log = structlog.get_logger()


def listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, or a TunefleetError that says which address was refused."""
    return serving.listen(host, port, "the API")


async def serve(
    client: TunefleetClient,
    settings: FleetSettings,
    stopping: asyncio.Event,
    sock: socket.socket | None = None,
) -> None:
    """Serve the API and dashboard on `sock` (bound beforehand, so that a busy port fails before anything
    else is done), or else on `api_host:api_port`, until `stopping` is set."""
    if sock is None:
        sock = listen(settings.api_host, settings.api_port)
    config = uvicorn.Config(
        create_app(client, settings),
        log_config=None,
        access_log=False,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=5,
    )
    server = EmbeddedServer(config)
    bound_host, bound_port = sock.getsockname()[:2]
    log.info("api_listening", url=f"http://{_url_host(bound_host)}:{bound_port}/")
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True
        stop.cancel()
        try:
            await serving
        except SystemExit as exc:
            raise TunefleetError(f"the API server failed to start (exit {exc.code})") from None
        finally:
            sock.close()
    log.info("api_stopped")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
