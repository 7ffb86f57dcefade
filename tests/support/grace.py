"""The numbers a deployment's stop timeout must exceed, read from the code rather than copied.

A stopping worker gives its agents `stop_grace_s` between SIGTERM and SIGKILL, then waits a few seconds
more for its cases to go back to the queue (`FleetWorker._stop_when_released`). Compose's
`stop_grace_period`, Kubernetes' `terminationGracePeriodSeconds` and systemd's `TimeoutStopSec` must
each be longer than the two together.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from service.core.settings import FleetSettings

ROOT = Path(__file__).resolve().parents[2]
FLEET_WORKER = ROOT / "workers" / "fleet_worker.py"
RELEASE_METHOD = "_stop_when_released"


def default_stop_grace_s() -> float:
    """FleetSettings' default `stop_grace_s`."""
    default = FleetSettings.model_fields["stop_grace_s"].default
    assert isinstance(default, float), f"stop_grace_s has no float default: {default!r}"
    return default


def release_wait_s(source: str | None = None) -> float:
    """The N of `timeout=...stop_grace_s + N` in `_stop_when_released` (workers/fleet_worker.py)."""
    tree = ast.parse(FLEET_WORKER.read_text() if source is None else source)
    methods = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name == RELEASE_METHOD
    ]
    assert len(methods) == 1, f"{FLEET_WORKER}: expected one {RELEASE_METHOD}, found {len(methods)}"
    timeouts = [
        kw.value
        for call in ast.walk(methods[0])
        if isinstance(call, ast.Call)
        for kw in call.keywords
        if kw.arg == "timeout"
    ]
    assert len(timeouts) == 1, f"{RELEASE_METHOD}: expected one `timeout=` argument, found {len(timeouts)}"
    expr = timeouts[0]
    ok = (
        isinstance(expr, ast.BinOp)
        and isinstance(expr.op, ast.Add)
        and isinstance(expr.left, ast.Attribute)
        and expr.left.attr == "stop_grace_s"
        and isinstance(expr.right, ast.Constant)
        and isinstance(expr.right.value, int | float)
    )
    assert ok, f"{RELEASE_METHOD}: the timeout is `{ast.unparse(expr)}`, not `...stop_grace_s + <seconds>`"
    assert isinstance(expr, ast.BinOp) and isinstance(expr.right, ast.Constant)
    seconds = expr.right.value
    assert isinstance(seconds, int | float)
    return float(seconds)


def needed_stop_timeout_s(stop_grace_s: float | None = None) -> float:
    """What a stop timeout must exceed for a worker with this grace (the default when None)."""
    grace = default_stop_grace_s() if stop_grace_s is None else stop_grace_s
    return grace + release_wait_s()


def parse_duration(text: str) -> float:
    """A compose or systemd duration (`30s`, `1m30s`, `1500ms`) in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)
