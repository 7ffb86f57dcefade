"""The dashboard of `tunefleet demo`, served while the demo runs (and, with `--keep-serving`, after it ends
until Ctrl-C) on a loopback address: `api_port` when it is free, else a free port the system chooses.
Reads are open on that address (loopback only: nobody else can reach it); writes still need the fleet's
`api_token`, so the demo's page can be browsed, not used to steer the fleet."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator

from rich.console import Console

from service.api.server import listen, serve
from service.client.client import TunefleetClient
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings

LOOPBACK = "127.0.0.1"


def _bind(port: int) -> socket.socket:
    try:
        return listen(LOOPBACK, port)
    except TunefleetError:  # busy (another fleet's API, an earlier demo): any free port
        return listen(LOOPBACK, 0)


@contextlib.asynccontextmanager
async def demo_dashboard(
    client: TunefleetClient, settings: FleetSettings, console: Console, tuning: str
) -> AsyncIterator[str]:
    """Serve the dashboard on a loopback port while the block runs; print and yield its address."""
    sock = _bind(settings.api_port)
    port = sock.getsockname()[1]
    url = f"http://{LOOPBACK}:{port}/"
    stopping = asyncio.Event()
    open_reads = settings.model_copy(update={"api_public_read": True, "api_host": LOOPBACK, "api_port": port})
    task = asyncio.create_task(serve(client, open_reads, stopping, sock), name="demo-dashboard")
    console.print(f"dashboard: {url}  (versions of {tuning}: {url}#/versions/{tuning})", highlight=False)
    try:
        yield url
    finally:
        stopping.set()
        await task


async def keep_serving(settings: FleetSettings, console: Console, tuning: str) -> None:
    """Serve the finished demo's dashboard until Ctrl-C or SIGTERM. The signals set an event, as the
    daemon's do, rather than cancel the main task (asyncio.run's own Ctrl-C): the server's shutdown then
    runs in a task that no cancel is pending on, with nothing left to swallow one."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with TunefleetClient(settings) as client, demo_dashboard(client, settings, console, tuning):
            console.print("serving the finished tuning's dashboard; Ctrl-C stops it", highlight=False)
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
