"""The read side: fleet status from the live counters (no scans), results and case detail from the store."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from service.core import keys
from service.core.errors import StoreError
from service.core.events import COST_SCALE
from service.core.files import read_model
from service.core.models.records import ApplyRecord, Feedback, RunRecord
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
from service.core.store import PHASES, CaseStore, TuningStore
from service.gate.counters import GateCounts

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
        names_raw, depth, breaker, paused, workers_raw, held_raw, limits_raw = await pipe.execute()
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
    workers = []
    for (name, seen), raw in zip(workers_raw, replies[len(names) * per :], strict=True):
        presence = WorkerPresence.parse(raw)
        if presence is None:
            continue
        workers.append(
            WorkerStatus(
                name=name.decode(), slots=presence.slots, cases=presence.cases, last_seen_ms=int(seen)
            )
        )
    running = sum(t.running for t in tunings)
    return FleetStatus(
        queue_depth=max(0, int(depth) - running),
        in_progress=running,
        breaker={k.decode(): v.decode() for k, v in breaker.items()},
        paused=bool(paused),
        workers=workers,
        tunings=tunings,
        llm_limits=[
            limit
            for provider, raw in sorted(limits_raw.items())
            if (limit := LlmLimit.parse(provider.decode(), raw)) is not None
        ],
    )


def stored_runs(case_store: CaseStore) -> dict[str, int]:
    """The agent runs of a case revision as its folder keeps them, as `runs:<outcome>` counters (what
    service.core.events.counter_moves counted live): `ran`, the tries whose run was graded (not void);
    `void`, the runs set aside."""
    ran = void = 0
    for phase in PHASES:
        folder = case_store.root / phase
        if folder.is_dir():
            void += sum(1 for p in folder.glob("*.void-*") if p.is_dir())
    for _phase, _attempt, paths in case_store.attempts():
        try:
            feedback = read_model(paths.feedback, Feedback)
        except StoreError:  # unreadable: the try is graded again, and counted then
            continue
        if feedback is not None and feedback.verdict != "void" and paths.run.exists():
            ran += 1
    return {field: n for field, n in (("runs:ran", ran), ("runs:void", void)) if n}


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
    )
