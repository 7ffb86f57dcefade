"""3. Applies: a share of the cases need one apply (a rule of their own) that takes APPLY_S under the
fleet-wide improvements lock; the step throughput against the ideal, with `wait_for_apply` on and off
(TUNEFLEET_WAIT_FOR_APPLY in the workers' environment).

Ideal makespan: the largest of the slot bound (every step's latency spread over every slot), the
lock bound (all applies one after the other) and the longest case; utilization = ideal / achieved.
The same run also counts snapshot extractions against the versions steps used (runs,
and applies' bases), with two workers racing for new versions."""

from __future__ import annotations

from typing import Any

from bench.common import (
    Env,
    Figure,
    apply_cases,
    makespan,
    median,
    run_async,
    simple_cases,
    start_gaps,
    versions_used,
    wait_for,
)
from tests.support.fleet import demo_adapter

NAME = "applies"
WORKERS = 2
SLOTS = 25
LATENCY_S = 0.5
APPLY_S = 0.2
SIMPLE = 80
WITH_APPLY = 20


def ideal_makespan() -> float:
    slot_time = SIMPLE * 4 * LATENCY_S + WITH_APPLY * (6 * LATENCY_S + APPLY_S)
    return max(slot_time / (WORKERS * SLOTS), WITH_APPLY * APPLY_S, 6 * LATENCY_S + APPLY_S)


def measure(wait_for_apply: bool) -> dict[str, Any]:
    ms = int(LATENCY_S * 1000)
    adapter = demo_adapter(ms, ms, int(APPLY_S * 1000))
    with Env(f"{NAME}-{'wait' if wait_for_apply else 'nowait'}", wait_for_apply=wait_for_apply) as env:
        tuning = run_async(env.register(env.tuning([], adapter=adapter)))
        cases = simple_cases(SIMPLE) + apply_cases(WITH_APPLY)
        # Interleave, so that applies are spread over the run as in a real data set.
        cases.sort(key=lambda c: int(str(c["id"])[1:]) * (5 if str(c["id"]).startswith("a") else 1.25))
        run_async(env.submit(tuning, cases))
        workers = [env.start_worker(SLOTS) for _ in range(WORKERS)]
        wait_for(lambda: env.results_done() >= len(cases), 180, "every case's result", interval_s=0.1)
        events = env.events()
        steps, span = makespan(events)
        versions = versions_used(events, env.settings.store / "tunings" / tuning)
        folders = [p for p in (env.settings.store / "tunings" / tuning / "snapshots").iterdir()]
        extractions = env.extractions({w.pid for w in workers})
        held = [
            e["duration_ms"] / 1000 for e in events if e["kind"] == "step_finished" and e["step"] == "apply"
        ]
    return {
        "steps": steps,
        "span": span,
        "applies": len(held),
        "held": median(held),
        "held_sum": sum(held),
        "run_gap": median(start_gaps(events, "run")),
        "versions": len(versions),
        "folders": len([f for f in folders if not f.name.startswith(".")]),
        "extractions": extractions,
    }


def run() -> list[Figure]:
    ideal = ideal_makespan()
    on = measure(True)
    off = measure(False)
    share = f"{WITH_APPLY} of {SIMPLE + WITH_APPLY} cases need one apply of {APPLY_S:g} s"
    setup = f"{WORKERS} workers x {SLOTS} slots, L={LATENCY_S:g} s; ideal makespan {ideal:.2f} s"
    figures = []
    for label, got in (("on", on), ("off", off)):
        figures.append(
            Figure(
                NAME,
                f"throughput / ideal, wait_for_apply {label}",
                100 * ideal / got["span"],
                "%",
                None,
                "",
                "",
                None,
                f"{share}; {setup}; {got['steps']} steps in {got['span']:.2f} s; "
                f"median delay from a step's end to the next run start: {1000 * got['run_gap']:.0f} ms; "
                f"lock held per apply: median {1000 * got['held']:.0f} ms for an applier of "
                f"{1000 * APPLY_S:.0f} ms ({got['held_sum']:.1f} s in all, one after the other)",
            )
        )
    figures[0].baseline = 100 * ideal / off["span"]
    figures[0].baseline_label = "the same with wait_for_apply off"
    both = [on, off]
    extractions = sum(g["extractions"] for g in both)
    versions = sum(g["versions"] for g in both)
    figures.append(
        Figure(
            NAME,
            "snapshot extractions per version",
            extractions / max(1, versions),
            "x",
            None,
            "",
            f"<= {WORKERS} (once per worker and version)",
            extractions <= versions * WORKERS and all(g["folders"] == g["versions"] for g in both),
            f"{versions} versions used (runs, apply bases), {extractions} extractions on {WORKERS} workers "
            f"(both runs); snapshot folders: {on['folders']} and {off['folders']}",
        )
    )
    return figures
