"""The gate's rule: does the candidate do worse than its base?

The gate is paired: every gate case runs on the candidate and on the candidate's base version, the same
number of times, and repeat k of a case on one side is paired with repeat k on the other. Only pairs
graded on both sides count (an item that failed for infrastructure says nothing of the prose). The
rules (GateConfig.rule):

- `strict`: rejected when any pair's base run passed and its candidate run failed;
- `max_drop`: rejected when the pass rate over the pairs drops by more than `max_drop`;
- `test`: the sequential test of service.kinds.evals.gate.sequential, after each round; undecided
  (`verdict` None) while it is open and rounds remain; rounds are sized by `next_repeats`.

A gate whose every item went ungraded rejects: the fleet never publishes what it did not check.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.models.acceptance import GateConfig
from service.core.models.records import GateVerdict
from service.kinds.evals.gate.boundaries import PLAN_LOOKS
from service.kinds.evals.gate.models import GateItem, TestOutcome
from service.kinds.evals.gate.sequential import Pairs, Plan, decide

DROP_EPSILON = 1e-9


@dataclass(frozen=True)
class Judgement:
    verdict: GateVerdict | None
    """None: the test is open and another round may run."""
    why: str
    broken: list[str]
    baseline_rate: float | None
    candidate_rate: float | None
    test: TestOutcome | None = None


def graded(items: list[GateItem]) -> list[GateItem]:
    """The pairs graded on both sides."""
    return [i for i in items if i.verdict is not None and i.baseline is not None]


def pairs_of(items: list[GateItem]) -> Pairs:
    both = graded(items)
    lost = sum(i.baseline == "pass" and i.verdict == "fail" for i in both)
    gained = sum(i.baseline == "fail" and i.verdict == "pass" for i in both)
    return Pairs(len(both), lost, gained, sum(i.baseline == "pass" for i in both))


def next_repeats(test: TestOutcome | None, cases: int, done: int, repeats: int, most: int) -> int:
    """Runs of each gate case on each side in the next round of rule test: about a PLAN_LOOKS-th of the
    planned pairs (at least `repeats`), no more than the plan still needs, and within `most` in all
    (`done` run so far); 0 when no round may follow."""
    if test is None or cases < 1:
        return min(repeats, most - done)
    step = -(-test.planned_pairs // (PLAN_LOOKS * cases))
    needed = -(-max(test.planned_pairs - test.pairs, 1) // cases)
    return max(0, min(max(repeats, min(step, needed)), most - done))


def _broken(config: GateConfig, pairs: list[GateItem]) -> list[str]:
    """strict: the cases with a pair lost; otherwise the cases whose candidate passed fewer of their pairs
    than their base did."""
    score: dict[str, int] = {}
    lost: set[str] = set()
    for item in pairs:
        score[item.case] = score.get(item.case, 0) + (item.verdict == "pass") - (item.baseline == "pass")
        if item.baseline == "pass" and item.verdict == "fail":
            lost.add(item.case)
    if config.judged_by == "strict":
        return sorted(lost)
    return sorted(case for case, change in score.items() if change < 0)


def judge(
    config: GateConfig, items: list[GateItem], history: list[Pairs] | None = None, *, last: bool = True
) -> Judgement:
    """The verdict on a candidate from its gate's items so far; `history`: the pairs' counts after each
    round (rule test; the items' own counts when None); `last`: no round may follow."""
    if not items:
        return Judgement("passed", "no case to gate on", [], None, None)
    pairs = graded(items)
    broken = _broken(config, pairs)
    if not pairs and last:
        return Judgement("rejected", f"none of the gate's {len(items)} items was graded", broken, None, None)
    before = sum(i.baseline == "pass" for i in pairs) / len(pairs) if pairs else None
    after = sum(i.verdict == "pass" for i in pairs) / len(pairs) if pairs else None
    figures = (
        f"pass rate {before:.2f} -> {after:.2f} over {len(pairs)} pairs"
        if before is not None and after is not None
        else "no pair graded yet"
    )
    rule = config.judged_by
    if rule == "test":
        most = config.max_repeats or config.repeats
        plan = Plan(config.alpha, config.beta, config.min_effect, max(1, len(_cases(items)) * most))
        outcome = decide(plan, history if history is not None else [pairs_of(items)], last=last)
        verdict: GateVerdict | None = None if outcome.decision == "open" else outcome.decision
        why = f"{outcome.line(config.min_effect)} ({figures})"
        return Judgement(verdict, why, broken, before, after, outcome)
    assert before is not None and after is not None
    if rule == "strict":
        if broken:
            return Judgement("rejected", f"broke {', '.join(broken)} ({figures})", broken, before, after)
        return Judgement("passed", f"broke no pair whose base run passed ({figures})", broken, before, after)
    assert config.max_drop is not None
    if before - after > config.max_drop + DROP_EPSILON:
        why = f"{figures}: a drop of {before - after:.2f}, more than {config.max_drop:g}"
        return Judgement("rejected", why, broken, before, after)
    return Judgement("passed", f"{figures}, within a drop of {config.max_drop:g}", broken, before, after)


def _cases(items: list[GateItem]) -> set[str]:
    return {item.case for item in items}
