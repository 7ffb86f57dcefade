"""The acceptance gate on a real fleet (real Redis, real worker processes, the demo agents): an edit that
breaks cases that passed is never published and its case ends `difficult: gated`, while the same tuning
without a gate publishes it; two applies gated at once are both published, one re-based."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from service.core import keys
from service.core.io.files import read_model
from service.core.models.records import ApplyRecord, Spend
from service.kinds.evals.gate.models import Candidate, GateRecord
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning

ADAPTER = demo_adapter(run_ms=150, analyze_ms=20, apply_ms=20)
KEEPERS = [case("keep-1", forbids=["risky"]), case("keep-2", forbids=["risky"])]
FIXER = case("fixer", rules=["risky"])


def kinds(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [e for e in fleet.events() if e["kind"] == kind]


async def current_tree(fleet: Fleet, tuning_root: Path) -> set[str]:
    """The files of the tuning's current version (Redis's pointer), as git lists them."""
    async with fleet.client() as client:
        version = (await client.redis.get(keys.version("t1"))).decode()
    repo = fleet.settings.store / "tunings" / "t1" / "system.git"
    out = subprocess.run(
        ["git", f"--git-dir={repo}", "ls-tree", "-r", "--name-only", version],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


async def run_in_two_waves(
    fleet: Fleet, root: Path, first: list[dict[str, Any]], then: list[dict[str, Any]], **config: Any
) -> None:
    """Start the tuning with `first`, wait until they ended, then submit `then` and wait for them."""
    tuning = write_tuning(root, first, adapter=ADAPTER, **config)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(len(first), timeout_s=60)
    for body in then:
        (root / "cases" / f"{body['id']}.yaml").write_text(yaml.safe_dump(body))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(len(first) + len(then), timeout_s=90)


async def test_the_gate_stops_an_edit_that_breaks_two_passed_cases(fleet: Fleet, tmp_path: Path) -> None:
    """keep-1 and keep-2 pass and complete; then fixer's every apply adds a rule that breaks both: each
    candidate is evaluated on them on the fleet, rejected and kept under a ref with its gate.json, the
    analyzer is told, the rule never reaches the current version, and fixer ends `difficult: gated`."""
    fleet.start_worker(concurrency=3)
    fleet.start_worker(concurrency=3)
    root = tmp_path / "t"
    await run_in_two_waves(
        fleet, root, KEEPERS, [FIXER], gate={"cases": "passed", "sample": 10, "rule": "strict"}
    )
    rows = fleet.results()
    assert rows["keep-1"].state == rows["keep-2"].state == "completed"
    assert rows["fixer"].state == "difficult"
    assert rows["fixer"].reason == "gated: keep-1, keep-2"
    assert "rules/risky.md" not in await current_tree(fleet, root)
    fixer = fleet.settings.store / "tunings" / "t1" / "cases" / "fixer" / "r1" / "nomem"
    for attempt in (1, 2):
        applied = read_model(fixer / str(attempt) / "apply.json", ApplyRecord)
        assert applied is not None and applied.rejected and applied.version is None
        gate = read_model(fixer / str(attempt) / "gate.json", GateRecord)
        assert gate is not None and gate.verdict == "rejected" and gate.broken == ["keep-1", "keep-2"]
        assert {(i.case, i.verdict) for i in gate.items} == {("keep-1", "fail"), ("keep-2", "fail")}
        assert gate.ref == f"refs/tunefleet/rejected/fixer/r1/nomem-{attempt}"
        repo = fleet.settings.store / "tunings" / "t1" / "system.git"
        kept = subprocess.run(
            ["git", f"--git-dir={repo}", "rev-parse", gate.ref], check=True, capture_output=True, text=True
        )
        assert kept.stdout.strip() == gate.candidate
    told = (fixer / "2" / "analysis.md").read_text()
    assert "Edits the gate rejected" in told and "keep-1, keep-2" in told
    assert len(kinds(fleet, "gate_started")) == len(kinds(fleet, "gate_rejected")) == 2
    ended = [e for e in kinds(fleet, "eval_item_ended") if e["data"]["eval"].startswith("gate-")]
    on_candidates = [e for e in ended if not e["data"]["eval"].startswith("gate-base-")]
    assert len(on_candidates) == 4 and {e["data"]["outcome"] for e in on_candidates} == {"fail"}
    on_base = [e for e in ended if e["data"]["eval"].startswith("gate-base-")]
    assert len(on_base) == 2 and {e["data"]["outcome"] for e in on_base} == {"pass"}  # shared by both gates
    async with fleet.client() as client:
        raw = await client.redis.hgetall(keys.stats("t1"))  # type: ignore[misc]
        shown = next(t for t in (await client.status()).tunings if t.name == "t1").gates
    assert shown is not None and (shown.under, shown.passed, shown.rejected) == (0, 0, 2)
    assert shown.tokens > 0 and "2 rejected" in shown.line()
    stats = {k.decode(): int(v) for k, v in raw.items()}
    assert stats["gates:rejected"] == 2 and stats["gates:under"] == 0 and stats["gates:tokens"] > 0
    ledger = [json.loads(line) for line in (fixer.parent / "spent.jsonl").read_text().splitlines()]
    assert [s["why"].split(" ")[0] for s in ledger] == ["gate", "gate"]


async def test_without_a_gate_the_same_edit_is_published(fleet: Fleet, tmp_path: Path) -> None:
    """The same tuning with no gate: fixer's apply is published at once (it completes), and the rule that
    breaks keep-1 and keep-2 is in the current version: the gate is what stopped it above."""
    fleet.start_worker(concurrency=3)
    root = tmp_path / "t"
    await run_in_two_waves(fleet, root, KEEPERS, [FIXER])
    rows = fleet.results()
    assert rows["fixer"].state == "completed"
    assert "rules/risky.md" in await current_tree(fleet, root)
    assert kinds(fleet, "gate_started") == []


async def test_two_applies_gated_at_once_are_both_published_one_rebased(fleet: Fleet, tmp_path: Path) -> None:
    """Two cases apply on the same version while their gates run; the first verdict publishes, the other
    candidate is re-applied on top (no file in common: its verdict stands) and published too: the final
    version holds both edits, and each apply's record says how it went."""
    fleet.start_worker(concurrency=4)
    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    passers = [case("p-1"), case("p-2"), case("p-3")]
    both = [case("needs-a", rules=["rule-a"]), case("needs-b", rules=["rule-b"])]
    await run_in_two_waves(
        fleet, root, passers, both, gate={"cases": "passed", "sample": 10, "rule": "strict"}
    )
    rows = fleet.results()
    assert all(row.state == "completed" for row in rows.values()), rows
    files = await current_tree(fleet, root)
    assert {"rules/rule-a.md", "rules/rule-b.md"} <= files
    records = [
        read_model(fleet.settings.store / "tunings/t1/cases" / c["id"] / "r1/nomem/1/apply.json", ApplyRecord)
        for c in both
    ]
    assert all(r is not None and r.gate is not None and r.gate.verdict == "passed" for r in records)
    assert sorted(bool(r and r.gate and r.gate.rebased) for r in records) == [False, True]
    assert len(kinds(fleet, "candidate_rebased")) == 1
    assert kinds(fleet, "candidate_rebased")[0]["data"]["rerun"] is False
    assert len(kinds(fleet, "gate_passed")) == 2


async def test_two_gates_on_one_base_share_its_paired_runs(fleet: Fleet, tmp_path: Path) -> None:
    """Two candidates made on the same base are each run twice on the three cases that passed, and so is
    their base, once for both: each gate pairs every (case, repeat) with the base's grade, the two gates
    read the same base runs, and the base ran 3 x 2 items, not twice that."""
    fleet.start_worker(concurrency=4)
    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    passers = [case("p-1"), case("p-2"), case("p-3")]
    both = [case("needs-a", rules=["rule-a"]), case("needs-b", rules=["rule-b"])]
    gate = {"cases": "passed", "sample": 10, "rule": "strict", "repeats": 2}
    await run_in_two_waves(fleet, root, passers, both, gate=gate)
    cases = fleet.settings.store / "tunings" / "t1" / "cases"
    gates = [read_model(cases / c["id"] / "r1/nomem/1/gate.json", GateRecord) for c in both]
    assert gates[0] is not None and gates[1] is not None
    assert gates[0].base == gates[1].base  # both made on one base, as the re-base below shows
    for gate_record in gates:
        assert gate_record is not None and gate_record.rule == "strict" and gate_record.runs == 12
        paired = {(i.case, i.repeat): i.baseline for i in gate_record.items}
        assert paired == {(p["id"], k): "pass" for p in passers for k in (1, 2)}
    base_evals = {
        e["data"]["eval"] for e in kinds(fleet, "eval_created") if e["data"]["purpose"] == "gate-base"
    }
    assert len(base_evals) == 3
    base_items = [e for e in kinds(fleet, "eval_item_ended") if e["data"]["eval"] in base_evals]
    assert sorted((e["case"], e["data"]["repeat"]) for e in base_items) == sorted(
        (p["id"], k) for p in passers for k in (1, 2)
    )
    assert len(kinds(fleet, "candidate_rebased")) == 1 and len(kinds(fleet, "gate_passed")) == 2


async def test_the_test_rule_publishes_a_harmless_candidate_after_two_of_four_rounds(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Rule test on eight cases that passed and the applying case itself (min_effect 0.3, up to 4
    repeats): the candidate and its base agree on every pair of the eight and the candidate fixes its
    own case, so the test publishes at its second look (one repeat, then the two that a fifth of its
    plan asks for) and stops early; gate.json, the verdict's event and status say so, with the
    statistic, the planned pairs and the 54 runs read."""
    fleet.start_worker(concurrency=4)
    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    passers = [case(f"p-{n}") for n in range(1, 9)]
    gate = {"cases": "passed", "sample": 10, "rule": "test", "min_effect": 0.3, "max_repeats": 4}
    await run_in_two_waves(fleet, root, passers, [case("needs-a", rules=["rule-a"])], gate=gate)
    assert fleet.results()["needs-a"].state == "completed"
    gate_file = fleet.settings.store / "tunings/t1/cases/needs-a/r1/nomem/1/gate.json"
    record = read_model(gate_file, GateRecord)
    assert record is not None and record.verdict == "passed" and record.rule == "test"
    assert record.test is not None and record.test.stopped_early and record.test.look == 2
    assert (record.rounds, record.runs, record.test.pairs) == (2, 54, 27)
    assert record.test.statistic >= record.test.bound and "stopped early" in record.why
    assert record.test.planned_pairs > record.test.pairs and "planned pairs" in record.why
    assert {item.case for item in record.items} == {*(c["id"] for c in passers), "needs-a"}
    passed = kinds(fleet, "gate_passed")
    assert len(passed) == 1 and passed[0]["data"]["stopped_early"] is True and passed[0]["data"]["runs"] == 54
    assert passed[0]["data"]["planned_pairs"] == record.test.planned_pairs
    bases = {e["data"]["eval"] for e in kinds(fleet, "eval_created") if e["data"]["purpose"] == "gate-base"}
    assert len(bases) == 18  # 9 cases x 2 rounds
    async with fleet.client() as client:
        shown = next(t for t in (await client.status()).tunings if t.name == "t1").gates
    assert shown is not None and (shown.early, shown.runs) == (1, 54)


async def test_a_regression_folder_is_judged_against_the_base_versions_grades(
    fleet: Fleet, tmp_path: Path
) -> None:
    """With `cases: folder`, each regression case is graded on the candidate and on its base version: a
    case that passes on the base and fails on the candidate is broken (the candidate is rejected), one
    that fails on both is not; the base's evaluations are shared by the gates on that base."""
    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    regress = root / "regress"
    regress.mkdir(parents=True)
    for body in (case("r-ok"), case("r-clash", forbids=["risky"]), case("r-never", rules=["never-added"])):
        (regress / f"{body['id']}.yaml").write_text(yaml.safe_dump(body))
    tuning = write_tuning(
        root, [FIXER], adapter=ADAPTER, gate={"cases": "folder", "folder": "regress", "rule": "strict"}
    )
    await fleet.start_tuning(tuning)
    rows = await fleet.wait_finished(1, timeout_s=90)
    assert rows["fixer"].state == "difficult" and rows["fixer"].reason == "gated: r-clash"
    attempts = fleet.settings.store / "tunings" / "t1" / "cases" / "fixer" / "r1" / "nomem"
    gate = read_model(attempts / "1" / "gate.json", GateRecord)
    assert gate is not None and gate.verdict == "rejected" and gate.broken == ["r-clash"]
    judged = {i.case: (i.baseline, i.verdict) for i in gate.items}
    assert judged == {"r-ok": ("pass", "pass"), "r-clash": ("pass", "fail"), "r-never": ("fail", "fail")}
    bases = {e["data"]["eval"] for e in kinds(fleet, "eval_created") if e["data"]["purpose"] == "gate-base"}
    assert len(bases) == 3  # one per regression case, shared by both gates (their candidates share a base)


async def test_a_case_cancelled_under_gate_ends_its_gate_and_counts_its_applier(
    fleet: Fleet, tmp_path: Path
) -> None:
    """fixer is cancelled while its candidate is under gate (the fleet paused, so no gate item runs): the
    case ends `cancelled`, every item of its gate ends `cancelled` and leaves the queue, the gate is no
    longer counted as under way, and what the applier spent is in the case's ledger and the tuning's
    totals although no apply record was written."""
    slow_apply = demo_adapter(run_ms=150, analyze_ms=20, apply_ms=1500)
    fleet.start_worker(concurrency=3)
    root = tmp_path / "t"
    tuning = write_tuning(
        root, KEEPERS, adapter=slow_apply, gate={"cases": "passed", "sample": 10, "rule": "strict"}
    )
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(2, timeout_s=60)
    (root / "cases" / "fixer.yaml").write_text(yaml.safe_dump(FIXER))
    await fleet.start_tuning(tuning)

    def fixer_applies() -> bool:
        return any(
            e.get("case") == "fixer" and e.get("step") == "apply" for e in kinds(fleet, "step_started")
        )

    await wait_until(fixer_applies, 60, "fixer's apply to start")
    async with fleet.client() as client:
        await client.pause()  # before the candidate's gate launches: its items start no run
        await wait_until(lambda: len(kinds(fleet, "gate_started")) == 1, 30, "the gate to start")
        assert await client.cancel("t1", "fixer") == ["case:t1:fixer:1"]
        await wait_until(lambda: fleet.results()["fixer"].state == "cancelled", 30, "fixer to end cancelled")
        await wait_until(lambda: len(kinds(fleet, "gate_abandoned")) == 1, 10, "the gate to be abandoned")
        status = await client.status()
        await client.resume()
    gate_eval = kinds(fleet, "gate_started")[0]["data"]["gate_eval"]

    def gate_items_ended() -> list[dict[str, Any]]:
        return [e for e in kinds(fleet, "eval_item_ended") if e["data"]["eval"] == gate_eval]

    await wait_until(lambda: len(gate_items_ended()) == 2, 30, "the gate's items to end")
    assert {e["data"]["outcome"] for e in gate_items_ended()} == {"cancelled"}
    assert not [e for e in kinds(fleet, "step_started") if e.get("data", {}).get("eval") == gate_eval]
    shown = next(t for t in status.tunings if t.name == "t1").gates
    assert shown is not None and shown.under == 0
    candidate = read_model(
        fleet.settings.store / "tunings/t1/cases/fixer/r1/nomem/1/candidate.json", Candidate
    )
    assert candidate is not None and candidate.output.usage.tokens > 0
    ledger = fleet.settings.store / "tunings/t1/cases/fixer/r1/spent.jsonl"
    applier = [Spend.model_validate_json(line) for line in ledger.read_text().splitlines()]
    assert [s.usage.tokens for s in applier if s.step == "apply"] == [candidate.output.usage.tokens]
    recorded = [
        e for e in kinds(fleet, "spend_recorded") if e.get("case") == "fixer" and e["step"] == "apply"
    ]
    assert [e["tokens"] for e in recorded] == [candidate.output.usage.tokens]
