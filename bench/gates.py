"""Gates: every apply goes through an acceptance gate (sample of 4 cases that passed); apply throughput
against the ideal, beside the same tuning with no gate, and the share of the fleet's slots busy while
gates run (which is what the lock not being held during a gate buys: the rest of the tuning goes on).

A first wave of cases passes (the gates' cases); the measured wave is cases that need one apply each,
mixed with cases that need none. Ideal makespan of the measured wave: the largest of the slot bound
(every step, gate items included, spread over every slot), the lock bound (the appliers one after the
other) and one apply case's critical path (its gate's items side by side). For scale, the bound if the
lock were held through each gate (appliers and gates one after the other) is printed too."""

from __future__ import annotations

import time
from typing import Any

from bench.common import Env, Figure, apply_cases, event_time, run_async, simple_cases, wait_for
from tests.support.fleet import demo_adapter

NAME = "gates"
WORKERS = 2
SLOTS = 8
LATENCY_S = 0.3
APPLY_S = 0.1
PASSED = 8
WITH_APPLY = 16
SIMPLE = 16
SAMPLE = 4


def ideal_makespan(gated: bool) -> float:
    gate_s = SAMPLE * 2 * LATENCY_S if gated else 0.0
    slot_time = SIMPLE * 4 * LATENCY_S + WITH_APPLY * (6 * LATENCY_S + APPLY_S + gate_s)
    path = 6 * LATENCY_S + APPLY_S + (2 * LATENCY_S if gated else 0.0)
    return max(slot_time / (WORKERS * SLOTS), WITH_APPLY * APPLY_S, path)


def _union(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(span: tuple[float, float], windows: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(span[1], end) - max(span[0], start)) for start, end in windows)


def gate_windows(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """When some gate ran: from each `gate_started` to its verdict (same case and try)."""
    began: dict[tuple[Any, ...], float] = {}
    windows = []
    for e in events:
        key = (e.get("case"), e.get("phase"), e.get("attempt"))
        if e["kind"] == "gate_started":
            began[key] = event_time(e)
        elif e["kind"] in ("gate_passed", "gate_rejected") and key in began:
            windows.append((began.pop(key), event_time(e)))
    return _union(windows)


def busy_intervals(events: list[dict[str, Any]], step: str | None = None) -> list[tuple[float, float]]:
    """Every step's time in a slot (cases' and gate items'): from its `step_finished` and its duration."""
    return [
        (event_time(e) - e["duration_ms"] / 1000, event_time(e))
        for e in events
        if e["kind"] == "step_finished" and (step is None or e["step"] == step)
    ]


def measure(gated: bool) -> dict[str, Any]:
    ms = int(LATENCY_S * 1000)
    adapter = demo_adapter(ms, ms, int(APPLY_S * 1000))
    config: dict[str, Any] = {"gate": {"sample": SAMPLE, "rule": "strict"}} if gated else {}
    with Env(f"{NAME}-{'on' if gated else 'off'}") as env:
        tuning = run_async(env.register(env.tuning([], adapter=adapter, **config)))
        workers = [env.start_worker(SLOTS) for _ in range(WORKERS)]
        for worker in workers:
            env.wait_worker_ready(worker)
        run_async(env.submit(tuning, simple_cases(PASSED, prefix="p")))
        wait_for(lambda: env.results_done() >= PASSED, 120, "the first wave", interval_s=0.1)
        began = time.time()
        cases = simple_cases(SIMPLE) + apply_cases(WITH_APPLY)
        cases.sort(key=lambda c: str(c["id"])[1:])  # interleaved
        run_async(env.submit(tuning, cases))
        wait_for(
            lambda: env.results_done() >= PASSED + len(cases), 300, "every case's result", interval_s=0.1
        )
        events = [e for e in env.events() if event_time(e) >= began]
    starts = [event_time(e) for e in events if e["kind"] == "step_started"]
    ends = [event_time(e) for e in events if e["kind"] == "step_finished"]
    span = (min(starts), max(ends))
    windows = gate_windows(events)
    gate_s = sum(end - start for start, end in windows)
    slots = WORKERS * SLOTS
    busy = sum(_overlap(b, windows) for b in busy_intervals(events))
    busy_all = sum(_overlap(b, [span]) for b in busy_intervals(events))
    applier = sum(_overlap(b, windows) for b in busy_intervals(events, "apply"))
    published = [
        e
        for e in events
        if e["kind"] == "step_finished" and e["step"] == "apply" and e["data"].get("outcome") == "published"
    ]
    return {
        "span": span[1] - span[0],
        "published": len(published),
        "gate_s": gate_s,
        "busy_in_gates": busy / (slots * gate_s) if gate_s else None,
        "busy_overall": busy_all / (slots * (span[1] - span[0])),
        "applier_in_gates": applier / gate_s if gate_s else None,
        "gates": sum(1 for e in events if e["kind"] == "gate_started"),
        "rebased": sum(1 for e in events if e["kind"] == "candidate_rebased"),
    }


def run() -> list[Figure]:
    on, off = measure(True), measure(False)
    ideal_on, ideal_off = ideal_makespan(True), ideal_makespan(False)
    serial = WITH_APPLY * (APPLY_S + 2 * LATENCY_S)
    setup = (
        f"{WORKERS} workers x {SLOTS} slots, L={LATENCY_S:g} s, applier {APPLY_S:g} s; {PASSED} cases passed "
        f"first, then {WITH_APPLY} cases needing one apply and {SIMPLE} needing none; gate: {SAMPLE} cases"
    )
    rate_on = 100 * ideal_on / on["span"]
    rate_off = 100 * ideal_off / off["span"]
    return [
        Figure(
            NAME,
            "apply throughput / ideal, gate on",
            rate_on,
            "%",
            rate_off,
            "the same with no gate (its own ideal)",
            ">= 50 %",
            rate_on >= 50,
            f"{setup}; {on['published']} applies published in {on['span']:.2f} s "
            f"({on['published'] / on['span']:.2f}/s; ideal makespan {ideal_on:.2f} s, with the lock held "
            f"through each gate it could be no less than {serial:.2f} s); {on['gates']} gates, "
            f"{on['rebased']} candidates re-based; no gate: {off['published']} in {off['span']:.2f} s "
            f"(ideal {ideal_off:.2f} s)",
        ),
        Figure(
            NAME,
            "slots busy while gates run",
            100 * (on["busy_in_gates"] or 0),
            "%",
            100 * off["busy_overall"],
            "slots busy over the whole run, no gate",
            ">= 50 %",
            (on["busy_in_gates"] or 0) >= 0.5,
            f"gates under way {on['gate_s']:.2f} s in all (union); step time of every case and gate item "
            f"over {WORKERS * SLOTS} slots in those windows; the applier (the one step under the lock) "
            f"ran {100 * (on['applier_in_gates'] or 0):.0f} % of that time; gate on, whole run: "
            f"{100 * on['busy_overall']:.0f} %",
        ),
    ]
