"""What a worker process loads to start: its kinds' code, without the libraries only some steps need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOADS_KINDS = """
import json, sys
from service.core.settings import FleetSettings
from workers.fleet_worker import slices
from workers.jobs import job_kinds
kinds = job_kinds(slices(FleetSettings()))
print(json.dumps({"kinds": sorted(kinds), "loaded": sorted(m for m in sys.modules if "." not in m)}))
"""


def test_a_worker_loads_its_kinds_without_numpy_scipy_or_tiktoken() -> None:
    """Every kind's worker code (the gate's included) loads in a fresh interpreter without numpy, scipy
    or tiktoken: the `test` rule's statistics and the size guard's tokenizer import them on first use,
    and they add about 75 MiB to every worker that never runs either."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", LOADS_KINDS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {"run_case", "run_eval_item", "run_goal"} <= set(found["kinds"])
    assert {"numpy", "scipy", "tiktoken"} & set(found["loaded"]) == set()
