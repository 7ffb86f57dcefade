"""6. Dispatch latency: from a case's submission to its first step_started (the event's `at` in
events.jsonl), against bare arq's enqueue -> job start, both workers idle and polling every 0.05 s,
on the same Redis at the same time: submissions of the two alternate, spaced at random. Cases then
stay in flight (demo steps of 10 minutes; free slots for all), as real agents do, so that each start is
measured on a worker that is not busy finishing the previous one; the arq jobs end at once, so that
arq's worker is idle too (its best case). Then, for the notes, arq again with its jobs staying in
flight: each poll re-checks every running job still in its queue (three round trips each).

The case files are written into the store beforehand, so that the client's submit does no more than
its reads, arq's enqueue_job and its event: the clock starts just before `submit`."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from bench import bare
from bench.common import (
    Env,
    Figure,
    event_time,
    percentile,
    run_async,
    simple_cases,
    wait_for,
)
from service.core.models.case import Case
from tests.support.fleet import demo_adapter

NAME = "dispatch"
SAMPLES = 150
POLL_S = 0.05
SLOTS = SAMPLES + 10
MAX_EXTRA_MS = 10.0


async def submit_both(env: Env, tuning: str, cases: list[Case]) -> dict[str, float]:
    """Alternate: one case through the client, one `mark` job (ending at once) through arq; the cases'
    send times."""
    sent: dict[str, float] = {}
    pool = await create_pool(RedisSettings(port=env.port))
    try:
        async with env.client() as client:
            for case in cases:
                await asyncio.sleep(random.uniform(0.02, 0.06))
                sent[case.id] = time.time()
                await client.submit(tuning, case)
                await asyncio.sleep(random.uniform(0.02, 0.06))
                await pool.enqueue_job("mark", case.id, time.time(), 0.0)
    finally:
        await pool.aclose()
    return sent


async def arq_in_flight(env: Env) -> None:
    """`mark` jobs that stay in flight, spaced at random."""
    pool = await create_pool(RedisSettings(port=env.port))
    try:
        for n in range(SAMPLES):
            await asyncio.sleep(random.uniform(0.04, 0.12))
            await pool.enqueue_job("mark", f"long{n}", time.time(), 600.0)
    finally:
        await pool.aclose()


def _first_starts(events: list[dict[str, Any]]) -> dict[str, float]:
    first: dict[str, float] = {}
    for event in events:
        if event["kind"] == "step_started" and event["case"] not in first:
            first[event["case"]] = event_time(event)
    return first


def run() -> list[Figure]:
    with Env(NAME, poll_delay_s=POLL_S) as env:
        tuning = run_async(env.register(env.tuning([], adapter=demo_adapter(600_000, 600_000, 0))))
        cases = [Case.model_validate(c) for c in simple_cases(SAMPLES)]
        store = env.settings.store / "tunings" / tuning
        async_client = env.client()
        for case in cases:
            async_client.store.tuning(tuning).case(case.id, case.rev).write_case(case)
        worker = env.start_worker(SLOTS)
        arq_worker = env.start_arq_worker(
            "--max-jobs", str(SLOTS), "--poll-delay", str(POLL_S), "--job-timeout", "900"
        )
        env.wait_worker_ready(worker)
        bare.wait_ready(env, arq_worker)
        time.sleep(0.5)
        sent = run_async(submit_both(env, tuning, cases))
        wait_for(lambda: len(bare.starts(env)) >= SAMPLES, 30, "the bare jobs' starts")
        wait_for(lambda: len(_first_starts(env.events())) >= SAMPLES, 60, "every case's start", worker)
        events = env.events()
        arq_ms = [1000 * (r["started"] - r["sent_at"]) for r in bare.starts(env)]
        assert store.is_dir()
        run_async(arq_in_flight(env))
        wait_for(lambda: len(bare.starts(env)) >= 2 * SAMPLES, 30, "the long bare jobs' starts")
        busy_ms = [1000 * (r["started"] - r["sent_at"]) for r in bare.starts(env)[SAMPLES:]]
    first = _first_starts(events)
    tf_ms = [1000 * (first[c] - sent[c]) for c in sent if c in first]
    figures = []
    for q in (50, 99):
        value, base = percentile(tf_ms, q), percentile(arq_ms, q)
        figures.append(
            Figure(
                NAME,
                f"submit -> first step_started, p{q}",
                value,
                "ms",
                base,
                f"bare arq enqueue -> job start, p{q}",
                f"<= arq + {MAX_EXTRA_MS:.0f} ms",
                value <= base + MAX_EXTRA_MS,
                f"{len(tf_ms)} cases and {len(arq_ms)} jobs, alternating; poll {POLL_S} s; "
                f"tunefleet - arq = {value - base:+.1f} ms; arq with its jobs in flight (up to "
                f"{SAMPLES}): p{q} {percentile(busy_ms, q):.0f} ms",
            )
        )
    return figures
