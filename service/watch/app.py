"""`tunefleet watch`: the live view's loop. A refresher reads the fleet every `refresh_s`; the screen
is drawn again after every refresh and every key. The terminal gets its settings back on the way
out, whether by `q`, an exception, SIGTERM, SIGINT or a hang-up.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from redis.exceptions import RedisError
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from service.client.client import TunefleetClient
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings
from service.core.store import Store
from service.watch.logtail import find_step_log, read_tail
from service.watch.snapshot import WatchSnapshot, take_snapshot
from service.watch.state import Key, WatchState
from service.watch.terminal import cbreak, key_reader
from service.watch.view import follow, overview

SNAPSHOT_TIMEOUT_S = 5.0
"""A refresh that takes longer than this is abandoned and shown as an alert; the next one retries."""

QUIT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Latest:
    """The newest snapshot the refresher took, and why the last refresh failed if it did."""

    def __init__(self) -> None:
        self.snapshot: WatchSnapshot | None = None
        self.alert: str | None = None


def screen(state: WatchState, latest: Latest, store: Store, width: int, height: int) -> RenderableType:
    """What to draw now."""
    snapshot = latest.snapshot
    if snapshot is None:
        return Text(latest.alert or "reading the fleet...", style="red" if latest.alert else "dim")
    if state.mode == "follow" and state.follow is not None:
        tail = read_tail(find_step_log(store, state.follow), max_lines=max(1, height))
        return follow(snapshot, state.follow, tail, width, height, alert=latest.alert)
    return overview(snapshot, state.row(snapshot), width, height, alert=latest.alert)


async def refresh_forever(
    client: TunefleetClient,
    latest: Latest,
    wake: asyncio.Queue[Key | None],
    event_count: Callable[[], int],
    refresh_s: float,
) -> None:
    """Take a snapshot every `refresh_s` and wake the drawer; a failure becomes the alert line."""
    while True:
        try:
            async with asyncio.timeout(SNAPSHOT_TIMEOUT_S):
                latest.snapshot = await take_snapshot(
                    client.redis, client.settings.queue, event_count=event_count()
                )
            latest.alert = None
        except TimeoutError:
            latest.alert = f"Redis did not answer within {SNAPSHOT_TIMEOUT_S:g} s (retrying)"
        except (RedisError, OSError) as exc:
            latest.alert = f"Redis: {exc or type(exc).__name__} (retrying)"
        wake.put_nowait(None)
        await asyncio.sleep(refresh_s)


@contextmanager
def quit_on_signals(wake: asyncio.Queue[Key | None]) -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP quit the watch cleanly; SIGWINCH redraws it at the new size."""
    loop = asyncio.get_running_loop()
    for sig in QUIT_SIGNALS:
        loop.add_signal_handler(sig, wake.put_nowait, "quit")
    loop.add_signal_handler(signal.SIGWINCH, wake.put_nowait, None)
    try:
        yield
    finally:
        for sig in (*QUIT_SIGNALS, signal.SIGWINCH):
            loop.remove_signal_handler(sig)


async def interact(live: Live, wake: asyncio.Queue[Key | None], latest: Latest, store: Store) -> None:
    """Draw, then wait for a key or a refresh, until `q` (or a quit signal)."""
    state = WatchState()
    console = live.console
    while True:
        width, height = console.size
        live.update(screen(state, latest, store, width, height), refresh=True)
        pressed = [await wake.get()]
        while not wake.empty():
            pressed.append(wake.get_nowait())
        if "quit" in pressed:
            return
        snapshot = latest.snapshot
        if snapshot is None:
            continue
        for key in pressed:
            if key is not None:
                state = state.press(key, snapshot)
        state = state.track(snapshot)


async def watch(settings: FleetSettings, *, refresh_s: float = 0.5) -> None:
    """Show the fleet live in this terminal until `q`: the overview, or one step's agent log."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise TunefleetError(
            "tunefleet watch needs a terminal on stdin and stdout; use `tunefleet status` in scripts"
        )
    fd = sys.stdin.fileno()
    console = Console()
    store = Store(settings.store)
    wake: asyncio.Queue[Key | None] = asyncio.Queue()
    latest = Latest()
    async with TunefleetClient(settings) as client:
        with (
            cbreak(fd),
            key_reader(fd, wake),
            quit_on_signals(wake),
            Live(
                console=console,
                screen=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live,
        ):
            refresher = asyncio.create_task(
                refresh_forever(client, latest, wake, lambda: console.size.height, refresh_s)
            )
            try:
                await interact(live, wake, latest, store)
            finally:
                refresher.cancel()
                with suppress(asyncio.CancelledError):
                    await refresher
