"""Prometheus metrics of a fleet, one registry per API app.

Two sources:
- the live state in Redis (queue, running cases, outcomes, runs, tokens, cost, breaker, workers,
  improvements locks), read at scrape time: `FleetMetrics.scrape()` awaits a snapshot, then the
  synchronous `FleetCollector` turns that snapshot into metric families;
- the event stream, tailed by `FleetMetrics.tail()`: step durations and waits, as histograms
  counted from the moment the tail started (a restart is a counter reset, as Prometheus expects).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import Metric
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.client.queries import fleet_status
from service.core import keys
from service.core.kinds import KindSlice
from service.core.models.api import LockState, StatusView
from service.core.models.event_types import StepStartedEvent
from service.core.models.events import Event, EventKind, parse_event
from service.core.models.status import WAIT_WORDS
from service.metric_families import NAMESPACE, ReadCollector, counter, gauge

log = structlog.get_logger()

FINAL_STATES = ("completed", "difficult", "failed", "cancelled")
STEP_BUCKETS_S = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
WAIT_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TAIL_BLOCK_MS = 1000
TAIL_BATCH = 500
TAIL_RETRY_S = (1.0, 30.0)
"""The first and the longest pause of the tail after a Redis error (doubling in between)."""


async def fleet_snapshot(redis: Redis, queue: str) -> StatusView:
    """The fleet status and the improvements locks, read now (two round trips)."""
    status = await fleet_status(redis, queue)
    locks = [LockState(tuning=t.name, **t.lock.model_dump()) for t in status.tunings]
    return StatusView(**status.model_dump(), locks=locks, sampled_at=datetime.now(UTC))


class FleetCollector(ReadCollector[StatusView]):
    """Turns the latest snapshot of the live state into metric families (no I/O at collect time)."""

    REFRESH_FAILED = "metrics_refresh_failed"

    def __init__(self, queue: str) -> None:
        super().__init__()
        self._queue = queue

    async def read(self, redis: Redis) -> StatusView:
        return await fleet_snapshot(redis, self._queue)

    def collect(self) -> Iterator[Metric]:
        up = gauge("redis_up", "1 if the last read of the fleet's Redis state succeeded, else 0.")
        up.add_metric([], 1.0 if self.last is not None else 0.0)
        yield up
        yield from super().collect()

    def families(self, read: StatusView) -> Iterator[Metric]:
        yield from self._fleet(read)
        yield from self._tunings(read)
        yield from self._breaker(read)
        yield from self._workers(read)
        yield from self._locks(read)
        yield from self._gates(read)

    def _fleet(self, s: StatusView) -> Iterator[Metric]:
        depth = gauge("queue_depth", "Case jobs in the queue that no worker runs now.")
        depth.add_metric([], s.queue_depth)
        running = gauge("cases_in_progress", "Cases a worker runs now, all tunings.")
        running.add_metric([], sum(t.running for t in s.tunings))  # cases only: status counts every kind
        paused = gauge("fleet_paused", "1 while the fleet is paused (no run starts).")
        paused.add_metric([], 1.0 if s.paused else 0.0)
        yield from (depth, running, paused)

    def _tunings(self, s: StatusView) -> Iterator[Metric]:
        running = gauge(
            "cases_running", "Cases at a step now (not waiting to start one), by step.", ["tuning", "step"]
        )
        blocked = gauge(
            "cases_blocked",
            "Cases a worker holds that wait to start their next step, by what they wait for "
            "(resume, hold, sandbox, apply, lock, gate).",
            ["tuning", "waiting_for"],
        )
        waiting = gauge("cases_waiting", "Submitted cases neither running nor finished.", ["tuning"])
        finished = gauge("cases_finished", "Cases that ended, by final state.", ["tuning", "state"])
        submitted = counter("cases_submitted", "Cases submitted into the tuning.", ["tuning"])
        runs = counter(
            "runs", "Agent runs, by outcome: ran (graded), void (set aside).", ["tuning", "outcome"]
        )
        tokens = counter("tokens", "Tokens spent by every step.", ["tuning"])
        counted = counter(
            "tokens_counted",
            "Tokens spent by every step, by how they were counted: measured (the server's or a wrapper's "
            "usage), estimated (by the fleet, where a server gave none), agent (the agent's own word).",
            ["tuning", "counted"],
        )
        cost = counter("cost_usd", "Money spent by every step, in US dollars.", ["tuning"])
        held = gauge(
            "tuning_held",
            "1 while the tuning is held (no run of it starts), by kind and reason.",
            ["tuning", "kind", "reason"],
        )
        for t in s.tunings:
            for step, count in sorted(t.running_by_step.items()):
                running.add_metric([t.name, step], count)
            for cause in WAIT_WORDS:
                blocked.add_metric([t.name, cause], t.waiting_by_cause.get(cause, 0))
            waiting.add_metric([t.name], t.waiting)
            for state in FINAL_STATES:
                finished.add_metric([t.name, state], getattr(t, state))
            submitted.add_metric([t.name], t.submitted)
            for outcome, count in sorted(t.runs_by_outcome.items()):
                runs.add_metric([t.name, outcome], count)
            tokens.add_metric([t.name], t.tokens)
            measured = max(0, t.tokens - t.estimated_tokens - t.unmeasured_tokens)
            for how, count in (
                ("measured", measured),
                ("estimated", t.estimated_tokens),
                ("agent", t.unmeasured_tokens),
            ):
                counted.add_metric([t.name, how], count)
            cost.add_metric([t.name], t.cost_usd)
            if t.held is not None:
                held.add_metric([t.name, t.held.kind, t.held.reason], 1.0)
        yield from (running, blocked, waiting, finished, submitted, runs, tokens, counted, cost, held)

    def _gates(self, s: StatusView) -> Iterator[Metric]:
        """The acceptance gates (service.kinds.evals.gate.counters), of the tunings that gated an apply."""
        under = gauge("gate_candidates", "Candidate versions under gate now.", ["tuning"])
        verdicts = counter(
            "gate_verdicts", "Gate verdicts, by verdict: passed, rejected.", ["tuning", "verdict"]
        )
        rebased = counter("gate_rebased", "Candidates re-applied on a newer current version.", ["tuning"])
        tokens = counter(
            "gate_tokens", "Tokens the gates' items spent (within tunefleet_tokens).", ["tuning"]
        )
        cost = counter(
            "gate_cost_usd", "Money the gates' items spent (within tunefleet_cost_usd).", ["tuning"]
        )
        runs = counter("gate_runs", "Graded runs the judged gates read, candidate and base.", ["tuning"])
        early = counter(
            "gate_early_stops", "Judged gates whose test stopped before its last round.", ["tuning"]
        )
        for t in s.tunings:
            if t.gates is None:
                continue
            under.add_metric([t.name], t.gates.under)
            verdicts.add_metric([t.name, "passed"], t.gates.passed)
            verdicts.add_metric([t.name, "rejected"], t.gates.rejected)
            rebased.add_metric([t.name], t.gates.rebased)
            tokens.add_metric([t.name], t.gates.tokens)
            cost.add_metric([t.name], t.gates.cost_usd)
            runs.add_metric([t.name], t.gates.runs)
            early.add_metric([t.name], t.gates.early)
        yield from (under, verdicts, rebased, tokens, cost, runs, early)

    def _breaker(self, s: StatusView) -> Iterator[Metric]:
        state = gauge("breaker_open", "1 while the fleet-wide sandbox circuit breaker is open.")
        state.add_metric([], 1.0 if s.breaker.get("state") == "open" else 0.0)
        trips = counter("breaker_trips", "Times the sandbox breaker opened.")
        trips.add_metric([], int(s.breaker.get("trips", 0)))
        probes = counter("breaker_probes", "Sandbox probes made while the breaker was open.")
        probes.add_metric([], int(s.breaker.get("probes", 0)))
        interval = gauge("breaker_probe_interval_seconds", "Current wait between two sandbox probes.")
        interval.add_metric([], int(s.breaker.get("interval_ms", 0)) / 1000)
        yield from (state, trips, probes, interval)

    def _workers(self, s: StatusView) -> Iterator[Metric]:
        alive = gauge("workers_alive", "Worker processes whose presence is current.")
        alive.add_metric([], len(s.workers))
        slots = gauge("worker_slots", "Cases a worker process may run at once.", ["worker"])
        cases = gauge("worker_cases", "Cases a worker process holds now.", ["worker"])
        seen = gauge("worker_last_seen_timestamp_seconds", "A worker's last heartbeat.", ["worker"])
        for w in s.workers:
            slots.add_metric([w.name], w.slots)
            cases.add_metric([w.name], len(w.cases))
            seen.add_metric([w.name], w.last_seen_ms / 1000)
        yield from (alive, slots, cases, seen)

    def _locks(self, s: StatusView) -> Iterator[Metric]:
        held = gauge("improvements_lock_held", "1 while an apply holds the tuning's lock.", ["tuning"])
        pending = gauge(
            "improvements_lock_pending", "Applies waiting for or holding the tuning's lock.", ["tuning"]
        )
        holder = gauge(
            "improvements_lock_holder",
            "1 for the case and worker whose apply holds the tuning's lock (none while it is free).",
            ["tuning", "case", "worker"],
        )
        for lock in s.locks:
            held.add_metric([lock.tuning], 1.0 if lock.held else 0.0)
            pending.add_metric([lock.tuning], lock.pending)
            if lock.holder is not None:
                holder.add_metric([lock.tuning, lock.holder.case, lock.holder.worker or ""], 1.0)
        yield from (held, pending, holder)


class FleetMetrics:
    """The registry of one API app: the live-state collector plus histograms fed by the event stream."""

    def __init__(self, redis: Redis, queue: str, kinds: tuple[KindSlice, ...]) -> None:
        self._redis = redis
        self.registry = CollectorRegistry()
        self.collector = FleetCollector(queue)
        self.registry.register(self.collector)
        self.kind_collectors: list[ReadCollector[Any]] = []
        """Every kind's own collector (its slice's `metrics` module, service.core.kinds)."""
        for kind in kinds:
            module = kind.front("metrics")
            if module is not None:
                collector: ReadCollector[Any] = module.collector()
                self.registry.register(collector)
                self.kind_collectors.append(collector)
        self.step_duration = Histogram(
            f"{NAMESPACE}_step_duration_seconds",
            "Duration of finished steps: a case's run, analyze, apply; a goal's plan, work, review.",
            ["tuning", "step"],
            buckets=STEP_BUCKETS_S,
            registry=self.registry,
        )
        lock_wait = "Time an apply waited for the improvements lock."
        self.lock_wait = self._waits("improvements_lock_wait_seconds", lock_wait)
        self.apply_wait = self._waits(
            "run_apply_wait_seconds", "Time a run start waited for pending applies."
        )
        self.events = Counter(
            f"{NAMESPACE}_events", "Events seen on the stream, by kind.", ["kind"], registry=self.registry
        )
        self.last_id: bytes | None = None

    def _waits(self, name: str, what: str) -> Histogram:
        """A histogram of one kind of wait, per tuning: `tunefleet_<name>` (a name ending in `_seconds`)."""
        return Histogram(
            f"{NAMESPACE}_{name}", what, ["tuning"], buckets=WAIT_BUCKETS_S, registry=self.registry
        )

    async def refresh(self) -> StatusView | None:
        """Read the live state for the next collection; None (and redis_up 0) when Redis fails."""
        return await self.collector.refresh(self._redis)

    async def scrape(self) -> bytes:
        """The Prometheus text exposition, with the live state read now."""
        await self.refresh()
        for collector in self.kind_collectors:
            await collector.refresh(self._redis)
        return generate_latest(self.registry)

    def observe(self, event: Event) -> None:
        """Count one event into the histograms."""
        self.events.labels(event.kind.value).inc()
        if event.kind is EventKind.STEP_FINISHED and event.step is not None and event.duration_ms is not None:
            self.step_duration.labels(event.tuning, event.step).observe(event.duration_ms / 1000)
        elif isinstance(event, StepStartedEvent):
            started = event.data
            if event.step == "apply" and started.lock_wait_ms is not None:
                self.lock_wait.labels(event.tuning).observe(started.lock_wait_ms / 1000)
            elif event.step == "run" and started.apply_wait_ms is not None:
                self.apply_wait.labels(event.tuning).observe(started.apply_wait_ms / 1000)

    async def mark_start(self) -> None:
        """Start counting at the stream's current end (events before it are not counted)."""
        newest = await self._redis.xrevrange(keys.events(), count=1)
        self.last_id = newest[0][0] if newest else b"0-0"

    async def catch_up(self, block_ms: int | None = None) -> int:
        """Read and count the events after the last one seen; how many there were."""
        if self.last_id is None:
            await self.mark_start()
        assert self.last_id is not None
        reply = await self._redis.xread({keys.events(): self.last_id}, count=TAIL_BATCH, block=block_ms)
        seen = 0
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self.last_id = entry_id
                seen += 1
                try:
                    self.observe(parse_event(fields[b"event"]))
                except (KeyError, ValidationError) as exc:
                    log.warning("metrics_event_unreadable", id=entry_id.decode(), error=str(exc))
        return seen

    async def tail(self) -> None:
        """Follow the event stream until cancelled, riding out Redis outages."""
        pause_s = TAIL_RETRY_S[0]
        while True:
            try:
                await self.catch_up(block_ms=TAIL_BLOCK_MS)
                pause_s = TAIL_RETRY_S[0]
            except (RedisError, OSError) as exc:
                log.warning("metrics_tail_failed", error=str(exc), retry_in_s=pause_s)
                await asyncio.sleep(pause_s)
                pause_s = min(pause_s * 2, TAIL_RETRY_S[1])
