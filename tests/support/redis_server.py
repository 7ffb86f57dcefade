"""A private redis-server for one test: free port, own folder, optional AOF; can be killed and restarted."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import cast

import redis

READY_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process bound to loopback."""

    def __init__(self, folder: Path, *, appendonly: bool = False, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (make test installs it: apt-get install redis-server)"
            )
        self.binary = binary
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.folder),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            "--logfile",
            str(self.folder / "redis.log"),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server for good (SIGKILL: nothing is saved beyond what AOF already holds)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def get(self, key: str) -> bytes | None:
        with self.client() as r:
            return cast(bytes | None, r.get(key))

    def exists(self, key: str) -> bool:
        with self.client() as r:
            return bool(r.exists(key))

    def zcard(self, key: str) -> int:
        with self.client() as r:
            return int(cast(int, r.zcard(key)))

    def zmembers(self, key: str) -> list[str]:
        with self.client() as r:
            return [m.decode() for m in cast(list[bytes], r.zrange(key, 0, -1))]
