"""redis-server processes started with arguments of a test's choosing (ACL file, TLS, replication,
Sentinel); ready once the process itself listens on its port, since PING may need credentials or TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.support.ports import listens

READY_TIMEOUT_S = 10.0


class RedisProcess:
    """One redis-server process on loopback, its log in `folder`; stopped with SIGKILL."""

    def __init__(self, folder: Path, port: int, args: list[str]) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.argv = [binary, *args]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        path = self.folder / "redis.log"
        return path.read_text() if path.exists() else ""

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*self.argv, "--logfile", str(self.folder / "redis.log"), "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not listens(self.proc.pid, self.port):  # its own socket: another process may hold the port
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited at start ({self.proc.returncode}): {self.log[-800:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"redis-server did not listen on port {self.port} within {READY_TIMEOUT_S} s"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
