"""An evaluation's progress from the live counters (service.evals.counters), and those counters as the
store gives them back when Redis lost them."""

from __future__ import annotations

from redis.asyncio import Redis

from service.core import keys
from service.core.events import COST_SCALE
from service.core.validation import valid_only
from service.evals.counters import eval_progress_fields
from service.evals.models import EvalHead, EvalProgress, EvalResults, EvalStatus
from service.evals.stats import wilson


async def eval_progress(redis: Redis) -> list[EvalProgress]:
    """Every evaluation in `tf:evals` with its live counters (two round trips), oldest first; an entry
    that does not parse is left out."""
    raw = await redis.hgetall(keys.evals())  # type: ignore[misc]
    heads = valid_only(EvalHead, raw.values())
    heads.sort(key=lambda h: (h.created_at, h.id))
    tunings = sorted({head.tuning for head in heads})
    async with redis.pipeline(transaction=False) as pipe:
        for tuning in tunings:
            pipe.hgetall(keys.stats(tuning))
        replies = await pipe.execute()
    counters: dict[str, dict[str, dict[str, int]]] = {}
    for tuning, stats in zip(tunings, replies, strict=True):
        counters[tuning] = eval_progress_fields({k.decode(): int(v) for k, v in stats.items()})
    return [progress_of(head, counters.get(head.tuning, {}).get(head.id, {})) for head in heads]


def progress_of(head: EvalHead, counts: dict[str, int]) -> EvalProgress:
    """An evaluation's progress from its counters."""
    passed, graded_fail = counts.get("pass", 0), counts.get("fail", 0)
    failed, cancelled = counts.get("failed", 0), counts.get("cancelled", 0)
    done = passed + graded_fail + failed + cancelled
    status: EvalStatus = "queued" if done == 0 else "running"
    if done >= head.items:
        status = "cancelled" if cancelled else "finished"
    return EvalProgress(
        head=head,
        passed=passed,
        failed_grade=graded_fail,
        failed=failed,
        cancelled=cancelled,
        voids=counts.get("void", 0),
        rate=wilson(passed, passed + graded_fail),
        status=status,
    )


def stored_counters(evals: list[EvalResults]) -> dict[str, int]:
    """The counters these evaluations (of one tuning) moved, with the tokens and cost they spent, as
    their results give them."""
    counts: dict[str, int] = {}

    def add(field: str, amount: int) -> None:
        if amount:
            counts[field] = counts.get(field, 0) + amount

    for results in evals:
        add(f"eval:{results.id}:items", results.items)
        moved = {
            "pass": results.passed,
            "fail": results.graded - results.passed,
            "failed": results.failed,
            "cancelled": results.cancelled,
            "void": results.voids,
        }
        for outcome, n in moved.items():
            add(f"eval:{results.id}:{outcome}", n)
            add(f"eval_items:{outcome}", n)
        add("tokens", results.usage.tokens)
        add("tokens_unmeasured", results.usage.unmeasured_tokens)
        add("cost_usd_micros", round(results.usage.cost_usd * COST_SCALE))
    return counts
