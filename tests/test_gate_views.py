"""What people see of the gates: a tuning's gate counters, moved by the gate's events, read back as
status shows them, and rendered by `tunefleet status`, `tunefleet watch` and the metrics."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from service.cli.render import status_table
from service.core.events import counter_moves
from service.core.models.acceptance import GateCounts
from service.core.models.api import StatusView
from service.core.models.events import Event, EventKind, event_of
from service.core.models.status import FleetStatus, TuningStatus
from service.core.settings import FleetSettings
from service.kinds.registry import counter_rules
from service.metrics import FleetCollector
from service.watch.snapshot import WatchSnapshot
from service.watch.view import tunings_table

SHA = "a" * 40


def event(kind: EventKind, **data: object) -> Event:
    return event_of({"at": datetime.now(UTC), "kind": kind, "tuning": "t1", "case": "c", "data": data})


def verdict(kind: EventKind, **data: object) -> Event:
    """A gate's verdict event: its figures in `data`, the rest of its payload filled in."""
    given = {"gate_eval": "g1", "candidate": SHA, "broken": [], "items": 4, "ref": None, **data}
    return event(kind, **given)


SPENT = {"gate_tokens": 0, "gate_cost_usd": 0.0}


def counts_after(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        for field, amount in counter_moves(e, counter_rules(FleetSettings())).items():
            counts[field] = counts.get(field, 0) + amount
    return counts


def test_gate_events_move_the_gate_counters_and_never_the_tokens() -> None:
    """Two gates start; one passes, one is rejected, a re-base conflict rejects another without a gate:
    none is under gate at the end, and the gates' spend is counted apart (the items counted it in
    `tokens` already)."""
    counts = counts_after(
        [
            event(EventKind.GATE_STARTED, gate_eval="g1", candidate=SHA, items=4),
            event(EventKind.GATE_STARTED, gate_eval="g2", candidate=SHA, items=4),
            verdict(EventKind.GATE_PASSED, judged=True, gate_tokens=100, gate_cost_usd=0.5),
            verdict(EventKind.GATE_REJECTED, judged=True, gate_tokens=50, gate_cost_usd=0.25),
            event(EventKind.CANDIDATE_REBASED, candidate=SHA, onto=SHA, version=SHA, rerun=False),
            verdict(EventKind.GATE_REJECTED, judged=False, gate_tokens=0, gate_cost_usd=0.0),
        ]
    )
    gates = GateCounts.of(counts)
    assert gates is not None
    assert (gates.under, gates.started, gates.passed, gates.rejected, gates.rebased) == (0, 2, 1, 2, 1)
    assert gates.tokens == 150 and gates.cost_usd == 0.75 and "tokens" not in counts
    assert GateCounts.of({"tokens": 5}) is None


def test_status_watch_and_metrics_show_the_gates() -> None:
    """A tuning with gates: status prints its gate line, watch its gates column, the metrics its gate
    families; a tuning without shows none of them."""
    gates = GateCounts(
        under=1, started=4, passed=2, rejected=1, rebased=1, runs=240, early=2, tokens=900, cost_usd=0.12
    )
    tunings = [TuningStatus(name="t1", gates=gates), TuningStatus(name="t2")]
    status = FleetStatus(queue_depth=0, in_progress=0, breaker={}, paused=False, workers=[], tunings=tunings)
    console = Console(width=200, record=True)
    console.print(status_table(status))
    printed = console.export_text()
    assert "gate t1: 1 under gate, 2 passed, 1 rejected, 1 re-based" in printed and "gate t2" not in printed
    snapshot = WatchSnapshot(taken_at=datetime.now(UTC), status=status)
    console = Console(width=300, record=True)
    console.print(tunings_table(snapshot, 5))
    assert "1 on, 2 ok, 1 no" in console.export_text()
    collector = FleetCollector("tf:queue")
    collector.last = StatusView(**status.model_dump(), sampled_at=datetime.now(UTC))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }
    assert samples[("tunefleet_gate_candidates", (("tuning", "t1"),))] == 1
    assert samples[("tunefleet_gate_verdicts_total", (("tuning", "t1"), ("verdict", "rejected")))] == 1
    assert samples[("tunefleet_gate_cost_usd_total", (("tuning", "t1"),))] == 0.12
    assert samples[("tunefleet_gate_runs_total", (("tuning", "t1"),))] == 240
    assert samples[("tunefleet_gate_early_stops_total", (("tuning", "t1"),))] == 2
    assert not any(
        name.startswith("tunefleet_gate") and ("tuning", "t2") in labels for name, labels in samples
    )


def test_judged_gates_count_their_runs_and_early_stops_and_status_says_so() -> None:
    """Verdict events carry the runs each gate read and whether its test stopped early: the counters add
    them up (a re-base's conflict, judged false, adds nothing) and status's gate line prints them."""
    counts = counts_after(
        [
            event(EventKind.GATE_STARTED, gate_eval="g1", candidate=SHA, items=4),
            event(EventKind.GATE_STARTED, gate_eval="g2", candidate=SHA, items=4),
            verdict(EventKind.GATE_PASSED, judged=True, runs=120, stopped_early=True, **SPENT),
            verdict(EventKind.GATE_REJECTED, judged=True, runs=320, stopped_early=False, **SPENT),
            verdict(EventKind.GATE_REJECTED, judged=False, runs=999, stopped_early=True, **SPENT),
        ]
    )
    gates = GateCounts.of(counts)
    assert gates is not None and (gates.runs, gates.early) == (440, 1)
    assert "1 stopped early; gates read 440 runs (146.7 a gate)" in gates.line()
