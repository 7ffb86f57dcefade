"""The read side: fleet status from the live counters (no scans), results and case detail from the store."""

from __future__ import annotations

import time
from collections.abc import Iterable

from redis.asyncio import Redis

from service.core import keys
from service.core.io.files import read_model
from service.core.io.redis_memory import full_reason
from service.core.models.acceptance import GateCounts
from service.core.models.records import COST_SCALE, ApplyRecord, Feedback, RunRecord
from service.core.models.status import (
    AttemptView,
    CaseDetail,
    FleetStatus,
    Hold,
    LlmLimit,
    LockHolder,
    MirrorState,
    ResultRow,
    RunningCase,
    TuningLock,
    TuningStatus,
    WorkerPresence,
    WorkerStatus,
)
from service.core.store import TuningStore

TUNING_REPLIES = 7
"""Replies per tuning in the status query's second round trip: stats, running, version, mirror, lock,
the lock's holder, pending applies."""


def _lock(
    token: bytes | None, member: bytes | None, pending: int, running: dict[bytes, RunningCase]
) -> TuningLock:
    """The lock and its holder: the running case the lock was granted to (`member`, its job id), else
    the one that notes the lock's fencing token."""
    fence = int(token) if token is not None and token.isdigit() else None
    holder = running.get(member) if token is not None and member else None
    if holder is None:
        holder = next((e for e in running.values() if fence is not None and e.fence == fence), None)
    return TuningLock(
        held=token is not None,
        fence=fence,
        holder=LockHolder(**holder.model_dump(include={"case", "rev", "worker", "phase", "attempt"}))
        if holder is not None
        else None,
        pending=int(pending),
    )


def _tuning_status(
    name: str,
    stats: dict[bytes, bytes],
    running: dict[bytes, bytes],
    version: bytes | None,
    mirror: dict[bytes, bytes],
    lock: bytes | None,
    lock_holder: bytes | None,
    pending: int,
) -> TuningStatus:
    counts = {k.decode(): int(v) for k, v in stats.items()}
    parsed = {job: RunningCase.parse(raw) for job, raw in running.items()}
    by_job = {job: entry for job, entry in parsed.items() if entry is not None}
    entries = list(by_job.values())
    by_step: dict[str, int] = {}
    by_cause: dict[str, int] = {}
    for entry in entries:
        if entry.waiting is not None:
            by_cause[entry.waiting] = by_cause.get(entry.waiting, 0) + 1
        else:
            by_step[entry.step] = by_step.get(entry.step, 0) + 1
    unreadable = len(running) - len(entries)
    if unreadable:
        by_step["?"] = unreadable
    finished = sum(counts.get(f"state:{s}", 0) for s in ("completed", "difficult", "failed", "cancelled"))
    submitted = counts.get("queued", 0)
    return TuningStatus(
        name=name,
        submitted=submitted,
        running=len(running),
        running_by_step=by_step,
        waiting_by_cause=by_cause,
        waiting=max(0, submitted - finished - len(running)),
        completed=counts.get("state:completed", 0),
        difficult=counts.get("state:difficult", 0),
        failed=counts.get("state:failed", 0),
        cancelled=counts.get("state:cancelled", 0),
        runs_by_outcome={k.removeprefix("runs:"): v for k, v in counts.items() if k.startswith("runs:")},
        tokens=counts.get("tokens", 0),
        unmeasured_tokens=counts.get("tokens_unmeasured", 0),
        estimated_tokens=counts.get("tokens_estimated", 0),
        cost_usd=counts.get("cost_usd_micros", 0) / COST_SCALE,
        version=version.decode() if version else None,
        mirror=MirrorState.from_hash(mirror),
        lock=_lock(lock, lock_holder, pending, by_job),
        gates=GateCounts.of(counts),
    )


async def fleet_status(redis: Redis, queue: str) -> FleetStatus:
    """Everything `tunefleet status` shows, in two round trips whatever the number of cases."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.smembers(keys.tunings())
        pipe.zcard(queue)
        pipe.hgetall(keys.breaker())
        pipe.exists(keys.paused())
        pipe.zrange(keys.workers(), 0, -1, withscores=True)
        pipe.hgetall(keys.held())
        pipe.hgetall(keys.llm_limits())
        pipe.get(keys.store_full())
        pipe.info("memory")
        replies = await pipe.execute(raise_on_error=False)
    *replies, memory = replies  # INFO: a user of the fleet's ACL may not run it (no memory figures then)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    names_raw, depth, breaker, paused, workers_raw, held_raw, limits_raw, store_full = replies
    memory = None if isinstance(memory, Exception) else memory
    holds = {name.decode(): Hold.parse(raw) for name, raw in held_raw.items()}
    names = sorted(n.decode() for n in names_raw)
    worker_names = [w.decode() for w, _ in workers_raw]
    now_ms = int(time.time() * 1000)  # only to count the unexpired pending applies, for display
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(keys.stats(name))
            pipe.hgetall(keys.running(name))
            pipe.get(keys.version(name))
            pipe.hgetall(keys.mirror(name))
            pipe.get(keys.lock(name))
            pipe.get(keys.lock_holder(name))
            pipe.zcount(keys.lock_pending(name), now_ms, "+inf")
        for worker in worker_names:
            pipe.get(keys.worker(worker))
        replies = await pipe.execute()
    per = TUNING_REPLIES
    tunings = [_tuning_status(n, *replies[i * per : (i + 1) * per]) for i, n in enumerate(names)]
    for t in tunings:
        t.held = holds.get(t.name)
    workers = _workers(workers_raw, replies[len(names) * per :])
    by_kind = running_by_kind(job for worker in workers for job in worker.cases)
    running = max(sum(t.running for t in tunings), sum(by_kind.values()))
    return FleetStatus(
        queue_depth=max(0, int(depth) - running),
        in_progress=running,
        running_by_kind=by_kind,
        breaker={k.decode(): v.decode() for k, v in breaker.items()},
        paused=bool(paused),
        store_full=store_full.decode() if store_full else None,
        redis_full=full_reason(memory) if memory is not None else None,
        workers=workers,
        tunings=tunings,
        llm_limits=_llm_limits(limits_raw),
    )


def _workers(seen_raw: list[tuple[bytes, float]], presences: list[bytes | None]) -> list[WorkerStatus]:
    """The workers of the workers set whose presence is there and parses (an expired one is left out)."""
    workers = []
    for (name, seen), raw in zip(seen_raw, presences, strict=True):
        presence = WorkerPresence.parse(raw)
        if presence is not None:
            workers.append(
                WorkerStatus(
                    name=name.decode(), slots=presence.slots, cases=presence.cases, last_seen_ms=int(seen)
                )
            )
    return workers


def _llm_limits(limits_raw: dict[bytes, bytes]) -> list[LlmLimit]:
    """The providers' limits the fleet has learned, by provider; a value that does not parse is skipped."""
    return [
        limit
        for provider, raw in sorted(limits_raw.items())
        if (limit := LlmLimit.parse(provider.decode(), raw)) is not None
    ]


def running_by_kind(job_ids: Iterable[str]) -> dict[str, int]:
    """How many of `job_ids` (the jobs live workers hold, from their presence) are of each kind, told by
    the job id's prefix: `case:`, `goal:`, `eval:` (an evaluation's item; its gate's when the evaluation's
    id starts with `gate-`, service.kinds.evals.gate). Each job is counted once, though two workers may
    name it for a moment while it changes hands."""
    counts: dict[str, int] = {}
    for job_id in set(job_ids):
        prefix, _, rest = job_id.partition(":")
        if prefix == "eval":
            eval_id = rest.split(":")[1] if rest.count(":") >= 1 else ""
            kind: str | None = "gate items" if eval_id.startswith("gate-") else "eval items"
        else:
            kind = {"case": "cases", "goal": "goals"}.get(prefix)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


async def tuning_hold(redis: Redis, tuning: str) -> Hold | None:
    """The tuning's hold, if it is held (no run of it starts)."""
    raw = await redis.hget(keys.held(), tuning)  # type: ignore[misc]
    return Hold.parse(raw) if raw is not None else None


def results(store: TuningStore, hold: Hold | None = None) -> list[ResultRow]:
    """One row per case (its newest rev), finished or not; an unfinished one names the tuning's `hold`."""
    rows = []
    for case_store in store.latest_revs():
        result = case_store.result()
        rows.append(
            ResultRow(
                case=case_store.case_id,
                rev=case_store.rev,
                state=result.state if result else "unfinished",
                reason=result.reason if result else None,
                tokens=result.usage.tokens if result else 0,
                estimated_tokens=result.usage.estimated_tokens if result else 0,
                unmeasured_tokens=result.usage.unmeasured_tokens if result else 0,
                cost_usd=result.usage.cost_usd if result else 0.0,
                held=hold.reason if hold is not None and result is None else None,
                flaky=result.flaky if result else False,
            )
        )
    return rows


def case_detail(store: TuningStore, case_id: str) -> CaseDetail | None:
    """Every attempt of a case's newest rev, void tries included, in loop order."""
    revs = [c for c in store.case_revs() if c.case_id == case_id]
    if not revs:
        return None
    case_store = revs[-1]
    attempts = []
    for phase in ("nomem", "mem"):
        folder = case_store.root / phase
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir(), key=lambda p: (int(p.name.split(".")[0]), p.name)):
            if not path.is_dir():
                continue
            analysis = path / "analysis.md"
            attempts.append(
                AttemptView(
                    phase=phase,
                    attempt=int(path.name.split(".")[0]),
                    folder=path.name,
                    run=read_model(path / "run.json", RunRecord),
                    feedback=read_model(path / "feedback.json", Feedback),
                    apply=read_model(path / "apply.json", ApplyRecord),
                    analysis=analysis.read_text() if analysis.exists() else None,
                )
            )
    result = case_store.result()
    return CaseDetail(
        tuning=store.name,
        case=case_id,
        rev=case_store.rev,
        result=result.model_dump(mode="json") if result else None,
        attempts=attempts,
        handbacks=case_store.handbacks(),
    )
