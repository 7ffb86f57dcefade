"""An evaluation's progress from the live counters (service.kinds.evals.counters), and those counters as the
store gives them back when Redis lost them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from service.core import keys
from service.core.models.records import COST_SCALE
from service.core.validation import valid_only
from service.kinds.evals.counters import eval_progress_fields
from service.kinds.evals.models import EvalHead, EvalProgress, EvalResults, EvalStatus
from service.kinds.evals.stats import wilson


async def eval_progress(
    redis: Redis, retired: Callable[[], Awaitable[dict[str, EvalProgress]]] | None = None
) -> list[EvalProgress]:
    """Every evaluation in `tf:evals` with its live counters (two round trips), and those gc retired
    from Redis as `retired()` gives them (service.kinds.evals.retired), oldest first; an entry that
    does not parse is left out.

    `retired()` is read after Redis, and wins for an id Redis still shows: gc writes the record before
    it removes the head and counters, so an evaluation retired meanwhile is in one or the other, never
    shown with its counters half gone."""
    raw = await redis.hgetall(keys.evals())  # type: ignore[misc]
    heads = valid_only(EvalHead, raw.values())
    tunings = sorted({head.tuning for head in heads})
    async with redis.pipeline(transaction=False) as pipe:
        for tuning in tunings:
            pipe.hgetall(keys.stats(tuning))
        replies = await pipe.execute()
    counters: dict[str, dict[str, dict[str, int]]] = {}
    for tuning, stats in zip(tunings, replies, strict=True):
        counters[tuning] = eval_progress_fields({k.decode(): int(v) for k, v in stats.items()})
    found = {head.id: progress_of(head, counters.get(head.tuning, {}).get(head.id, {})) for head in heads}
    found.update(await retired() if retired is not None else {})
    merged = list(found.values())
    return sorted(merged, key=lambda p: (p.head.created_at, p.head.id))


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


def stored_counters(evals: list[EvalResults], retired: frozenset[str] = frozenset()) -> dict[str, int]:
    """The counters these evaluations (of one tuning) moved, with the tokens and cost they spent, as
    their results give them; the `retired` ones (gc removed their own counters from Redis) move only
    the tuning's sums."""
    counts: dict[str, int] = {}

    def add(field: str, amount: int) -> None:
        if amount:
            counts[field] = counts.get(field, 0) + amount

    for results in evals:
        own = results.id not in retired
        if own:
            add(f"eval:{results.id}:items", results.items)
        moved = {
            "pass": results.passed,
            "fail": results.graded - results.passed,
            "failed": results.failed,
            "cancelled": results.cancelled,
            "void": results.voids,
        }
        for outcome, n in moved.items():
            if own:
                add(f"eval:{results.id}:{outcome}", n)
            add(f"eval_items:{outcome}", n)
        add("tokens", results.usage.tokens)
        add("tokens_unmeasured", results.usage.unmeasured_tokens)
        add("cost_usd_micros", round(results.usage.cost_usd * COST_SCALE))
    return counts
