"""The true pass rate of an evaluation's version, when the tuning's runner and analyzer are the built-in
demo agents: the ground truth of service.kinds.cases.truth over the evaluation's own cases (as it keeps
them) and the rules of its version's prose. `tunefleet demo` prints it beside the measured rate."""

from __future__ import annotations

from service.core.models.tuning import DemoAdapter, TuningConfig
from service.core.store import TuningStore
from service.core.system import SystemRepo
from service.kinds.cases.truth import pass_rate, prose_rules, world_knobs
from service.kinds.evals.models import EvalResults
from service.kinds.evals.store import EvalStore


def demo_world(config: TuningConfig) -> DemoAdapter | None:
    """The analyzer's demo settings when the tuning runs in the demo world (a demo runner graded by the
    demo analyzer), else None: a model's world has no known truth."""
    if isinstance(config.runner, DemoAdapter) and isinstance(config.analyzer, DemoAdapter):
        return config.analyzer
    return None


async def true_pass_rate(
    config: TuningConfig, tuning: TuningStore, evaluation: EvalStore, results: EvalResults
) -> float | None:
    """The expected pass rate of `results`' version on its cases, every case weighted alike (as their
    repeats are); None outside the demo world. ConfigError naming the case and the field when a case's
    chance knobs are not valid."""
    analyzer = demo_world(config)
    if analyzer is None:
        return None
    snapshot = await SystemRepo(tuning.repo, tuning.snapshots).snapshot(results.version)
    held = prose_rules(snapshot)
    cases = [world_knobs(evaluation.case(row.case).demo, f"case {row.case}") for row in results.cases]
    return pass_rate(cases, held, analyzer.judge_flip)
