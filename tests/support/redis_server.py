"""A private redis-server for one test: free port (its own for sure), own folder, optional AOF; can be
killed and restarted on the same port."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import cast

import redis

from tests.support.ports import free_port, listens

READY_TIMEOUT_S = 10.0
START_ATTEMPTS = 20

__all__ = ["RedisServer", "free_port"]


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
        self._may_move = port is None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers. A port that another process took meanwhile (a test
        on another xdist worker, say) is given up for a new one, unless the port was chosen by the caller
        or the server ran there before (a restart keeps its address)."""
        for _ in range(START_ATTEMPTS if self._may_move else 1):
            if self._launch():
                break
            self.port = free_port()
        else:
            raise RuntimeError(f"redis-server could not listen on a free port: {self.log_tail()}")
        self._may_move = False
        deadline = time.monotonic() + READY_TIMEOUT_S
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:  # BusyLoadingError too, while an AOF loads
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def _launch(self) -> bool:
        """Start redis-server on self.port; True once it listens there itself, False if it exited (the
        port was taken)."""
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
        while not listens(self.proc.pid, self.port):
            if self.proc.poll() is not None:
                self.proc = None
                if not self._may_move:
                    raise RuntimeError(f"redis-server cannot listen on port {self.port}: {self.log_tail()}")
                return False
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not listen within {READY_TIMEOUT_S} s")
            time.sleep(0.01)
        return True

    def log_tail(self) -> str:
        path = self.folder / "redis.log"
        return path.read_text()[-800:] if path.exists() else "(no log)"

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
