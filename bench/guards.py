"""18. The guards that cost no run (issue 52): what checking one candidate costs the worker, on the demo's
instructions against the demo's cases, as `workers/kinds/evals/gate/guard.py` does it: the base's and the
candidate's text read from the repository in this process (pygit2), then leak (against the cases' word
runs, indexed once per tuning and worker: built here once, outside the timing, as a worker does), size
and collapse. The guards make no Redis call: nothing to count there.

    PYTHONPATH=. .venv/bin/python -m bench guards
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Figure, discard, median, run_async
from service.core.models.guards import GuardsConfig
from service.core.system import SystemRepo
from service.kinds.evals.guards.check import check
from service.kinds.evals.guards.leak import LeakIndex
from service.kinds.evals.history.commits import History
from service.kinds.evals.split import load_cases

NAME = "guards"
ROUNDS = 200
TARGET_MS = 5.0
DEMO = ROOT / "examples" / "demo"


async def _versions(root: Path) -> tuple[Path, str, str]:
    """The demo's system as a repository, and a candidate adding one rule on top of it."""
    repo = SystemRepo(root / "system.git", root / "snapshots")
    base = await repo.init_from(DEMO / "system")
    copy = root / "copy"
    shutil.copytree(DEMO / "system", copy)
    (copy / "rules").mkdir(exist_ok=True)
    (copy / "rules" / "bench-rule.md").write_text("- rule: answer in the language of the question\n")
    candidate = await repo.commit_folder(copy, base, "bench: a candidate\n")
    assert candidate is not None
    return repo.repo, base, candidate


def measure(root: Path) -> tuple[list[float], int, int]:
    repo, base, candidate = run_async(_versions(root))
    cases = [(case, False) for case in load_cases(DEMO / "cases", strict=False)]
    if (DEMO / "heldout").is_dir():
        cases += [(case, True) for case in load_cases(DEMO / "heldout", strict=False)]
    config = GuardsConfig(system_max_tokens=100_000, edit_max_growth_tokens=1_000)
    assert config.leak_min_words is not None
    index = LeakIndex(config.leak_min_words, cases)
    took_ms = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        history = History(repo)
        before = [text for _, text in history.texts(history.commit(base).tree)]
        after = [text for _, text in history.texts(history.commit(candidate).tree)]
        verdict, _ = check(config, before, after, index)
        took_ms.append((time.perf_counter() - began) * 1000)
        assert verdict is None
    return took_ms, len(cases), len(index)


def run() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix=f"{NAME}-", dir=ROOT / "var" / "bench"))
    try:
        took_ms, cases, runs = measure(root)
    finally:
        discard(root)
    value = median(took_ms)
    return [
        Figure(
            NAME,
            "guards per candidate (leak, size, collapse; texts read from git)",
            value,
            "ms",
            target=f"< {TARGET_MS:g} ms",
            met=value < TARGET_MS,
            note=f"the demo's instructions, {cases} cases ({runs} word runs indexed once), {ROUNDS} rounds, "
            f"median; p90 {sorted(took_ms)[int(0.9 * len(took_ms))]:.2f} ms; no Redis call",
        )
    ]
