"""Loaded by the benchmarks' child processes (their PYTHONPATH starts with this folder): records every
git subprocess a worker starts, so a benchmark can count snapshot extractions and git calls per step
without touching the product's code."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_path = os.environ.get("BENCH_AUDIT_LOG")

if _path:
    _out = open(_path, "a", buffering=1)  # noqa: SIM115 - kept open for the life of the process

    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "subprocess.Popen":
            return
        argv = [str(a) for a in (args[1] or [])]
        if argv and os.path.basename(argv[0]) == "git":
            sub = next((a for a in argv[1:] if not a.startswith("-")), "?")
            _out.write(json.dumps({"pid": os.getpid(), "at": time.time(), "git": sub, "argv": argv[1:6]}) + "\n")

    sys.addaudithook(_hook)
