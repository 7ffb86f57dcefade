"""Loopback ports for the tests' own servers. Tests run side by side (pytest-xdist workers, other
sessions' test runs), so a port found free may be taken again before a server binds it: a server is
ready only once its own process listens on the port, never because something answers there."""

from __future__ import annotations

import os
import socket
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def free_port() -> int:
    """A loopback port that was free a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a listening socket on `port`."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    fds = Path(f"/proc/{pid}/fd")
    try:
        links = [os.readlink(fd) for fd in fds.iterdir()]
    except OSError:  # it exited, or a descriptor closed while we looked
        return False
    return any(link.startswith("socket:[") and link[8:-1] in inodes for link in links)
