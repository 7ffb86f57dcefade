"""The keyboard side of the terminal: cbreak mode on the TTY (restored on the way out, whatever the
way), bytes decoded into the watch's keys, and a reader that feeds them to the event loop.

cbreak rather than full raw mode: keys arrive one by one without echo, while output processing
(newline handling) and the terminal's own signals (Ctrl-C, Ctrl-Z) keep working; no mouse
reporting is ever turned on, so the watch works over SSH on any ANSI terminal.
"""

from __future__ import annotations

import asyncio
import os
import termios
import tty
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from service.watch.state import Key

ESC = 0x1B
READ_BYTES = 1024

_PLAIN: dict[int, Key] = {
    ord("k"): "up",
    ord("j"): "down",
    ord("q"): "quit",
    ord("Q"): "quit",
    0x03: "quit",  # Ctrl-C, should the terminal pass it through
    0x04: "quit",  # Ctrl-D
    ord("\r"): "enter",
    ord("\n"): "enter",
    0x7F: "back",  # backspace (DEL)
    0x08: "back",  # backspace (BS)
}
_CURSOR: dict[str, Key] = {"A": "up", "B": "down", "D": "back"}


def _sequence_end(data: bytes, start: int) -> int:
    """The index just past the escape sequence `ESC [ ...` or `ESC O x` that begins at `start`."""
    introducer = data[start + 1]
    i = start + 2
    if introducer == ord("O"):
        return min(i + 1, len(data))
    while i < len(data) and not 0x40 <= data[i] <= 0x7E:
        i += 1
    return min(i + 1, len(data))


def parse_keys(data: bytes) -> list[Key]:
    """The keys in a chunk read from the terminal; bytes that mean nothing here are dropped.

    Arrows come as `ESC [ A` (or `ESC O A` in application mode); an ESC not followed by `[` or `O`
    is the Escape key itself.
    """
    keys: list[Key] = []
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == ESC and i + 1 < len(data) and data[i + 1] in (ord("["), ord("O")):
            end = _sequence_end(data, i)
            final = chr(data[end - 1]) if end - 1 > i + 1 else ""
            key = _CURSOR.get(final)  # with or without modifiers: `ESC [ 1 ; 5 A` is up too
            if key is not None:
                keys.append(key)
            i = end
            continue
        if byte == ESC:
            keys.append("back")
        elif byte in _PLAIN:
            keys.append(_PLAIN[byte])
        i += 1
    return keys


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys without echo or line buffering while inside; the terminal's settings as they were after."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        # A terminal that hung up (the SSH session ended) has no settings left to restore.
        with suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextmanager
def key_reader(fd: int, sink: asyncio.Queue[Key | None]) -> Iterator[None]:
    """Feed the keys typed on `fd` to `sink` while inside; the end of input (hang-up) reads as quit."""
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            sink.put_nowait("quit")
            return
        for key in parse_keys(data):
            sink.put_nowait(key)

    loop.add_reader(fd, readable)
    try:
        yield
    finally:
        loop.remove_reader(fd)
