"""A gate's rounds in the demo world with chance: each round is an evaluation of its own whose repeats
start at 1 again, and must draw its runs afresh (workers.adapters.demo_chance), or the sequential
rule would read the same runs again as new evidence."""

from __future__ import annotations

from pathlib import Path

import yaml

from service.core.io.files import read_model
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.gate.models import GateRecord
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning


async def test_each_round_of_a_gate_draws_its_runs_afresh(fleet: Fleet, tmp_path: Path) -> None:
    """Rule test on six regression cases that pass half their runs (min_effect 0.05: never decided
    early), up to four rounds of one repeat: the candidate's and the base's verdicts of a case are not one
    round's copied into the next: round 2's repeat 1 differs from round 1's for some case on some side
    (with fresh draws, that all twelve agree has odds of 2^-12; with copied draws, they all agree)."""
    fleet.start_worker(concurrency=8)
    root = tmp_path / "t"
    regress = root / "regress"
    regress.mkdir(parents=True)
    for n in range(1, 7):
        body = case(f"r-{n}", pass_p=0.5)
        (regress / f"{body['id']}.yaml").write_text(yaml.safe_dump(body))
    gate = {"cases": "folder", "folder": "regress", "rule": "test", "min_effect": 0.05, "max_repeats": 4}
    gate |= {"own_case": False}  # the six regression cases alone (twelve rows)
    adapter = demo_adapter(seed=5)
    tuning = write_tuning(root, [case("fixer", rules=["rule-a"])], adapter=adapter, gate=gate)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(1, timeout_s=90)
    gates = [
        read_model(path, GateRecord)
        for path in sorted((fleet.settings.store / "tunings/t1/cases/fixer").glob("r1/*/*/gate.json"))
    ]
    judged = [g for g in gates if g is not None and g.rounds >= 2]
    assert judged, f"no gate ran two rounds or more: {[(g.rounds, g.why) for g in gates if g is not None]}"
    record = judged[0]
    rows: dict[tuple[str, str], set[str | None]] = {}
    for item in record.items:
        rows.setdefault((item.case, "candidate"), set()).add(item.verdict)
        rows.setdefault((item.case, "base"), set()).add(item.baseline)
    assert len(rows) == 12
    assert any(len(verdicts) > 1 for verdicts in rows.values()), rows
    # Each round's evaluations number their repeats from 1: a round that drew as the one before would
    # give every case, on either side, the same verdict at repeat 1 as that round did.
    firsts = {
        side: _first_repeats(fleet.settings.store, purpose, version)
        for side, purpose, version in (
            ("candidate", "gate", record.candidate),
            ("base", "gate-base", record.base),
        )
    }
    pairs = [
        (side, case_id, verdicts[:2])
        for side, by_case in firsts.items()
        for case_id, verdicts in by_case.items()
        if len(verdicts) >= 2
    ]
    assert len(pairs) == 12, firsts
    assert any(first != second for _, _, (first, second) in pairs), pairs


def _first_repeats(store: Path, purpose: str, version: str) -> dict[str, list[str | None]]:
    """Per case, the verdict of repeat 1 in each of the gate's evaluations of `purpose` on `version`,
    oldest first."""
    evals = EvalFiles(Store(store))
    firsts: dict[str, list[str | None]] = {}
    for spec in evals.specs():  # oldest first
        if spec.purpose != purpose or spec.version != version:
            continue
        for ref in spec.cases:
            outcome = evals.known(spec.id).item(ref.id, ref.rev, 1).outcome()
            firsts.setdefault(ref.id, []).append(outcome.verdict if outcome is not None else None)
    return firsts
