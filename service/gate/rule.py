"""The gate's rule: does the candidate break what passed?

Only items graded on both sides count (an item that failed for infrastructure says nothing of the
prose). Without `max_drop`, a candidate is rejected when any gate case that passed fails on it; with
`max_drop`, when the pass rate over the graded items drops by more than that. A gate whose every item
went ungraded rejects: the fleet never publishes what it did not check.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.models.records import GateVerdict
from service.gate.config import GateConfig
from service.gate.models import GateItem

DROP_EPSILON = 1e-9


@dataclass(frozen=True)
class Judgement:
    verdict: GateVerdict
    why: str
    broken: list[str]
    baseline_rate: float | None
    candidate_rate: float | None


def judge(config: GateConfig, items: list[GateItem]) -> Judgement:
    """The verdict on a candidate from its gate's items."""
    if not items:
        return Judgement("passed", "no case to gate on", [], None, None)
    graded = [i for i in items if i.verdict is not None and i.baseline is not None]
    broken = sorted({i.case for i in graded if i.baseline == "pass" and i.verdict == "fail"})
    if not graded:
        return Judgement("rejected", f"none of the gate's {len(items)} items was graded", broken, None, None)
    before = sum(i.baseline == "pass" for i in graded) / len(graded)
    after = sum(i.verdict == "pass" for i in graded) / len(graded)
    figures = f"pass rate {before:.2f} -> {after:.2f} over {len(graded)} items"
    if config.max_drop is None:
        if broken:
            return Judgement("rejected", f"broke {', '.join(broken)} ({figures})", broken, before, after)
        return Judgement("passed", f"broke no case that passed ({figures})", broken, before, after)
    if before - after > config.max_drop + DROP_EPSILON:
        why = f"{figures}: a drop of {before - after:.2f}, more than {config.max_drop:g}"
        return Judgement("rejected", why, broken, before, after)
    return Judgement("passed", f"{figures}, within a drop of {config.max_drop:g}", broken, before, after)
