"""The guards that cost no run (issue 52), on a real fleet (real Redis, a real worker, a command applier
as a real subprocess): an applier that pastes a held-out case's input is rejected by `leak` naming the
case, one that doubles the instructions by `size`, one that empties them by `collapse`; each is published
when its guard is off; a bad guard value is refused in one line; the check is cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.client.tunings import load_tuning_file
from service.core import keys
from service.core.errors import ConfigError
from service.core.io.files import read_model
from service.core.models.case import Case
from service.core.models.guards import GuardsConfig, SizeBudget
from service.core.models.records import ApplyRecord
from service.core.store import Store
from service.kinds.evals.gate.models import GateRecord
from service.kinds.evals.guards.check import check
from service.kinds.evals.guards.leak import LeakIndex
from service.kinds.evals.guards.models import GuardRejection
from service.kinds.evals.history.views import VersionViews
from tests.support.fleet import Fleet, case, case_folder, demo_adapter, write_tuning

LEAKED = "When a refund is issued the billing system rounds the amount to the nearest cent for the customer"
SECRET = {"id": "secret", "rev": 1, "input": LEAKED, "rubric": [{"id": "r1", "text": "rounds to the cent"}]}
APPLIER = f"""
import json, pathlib, sys
mode, tree, out = sys.argv[1:4]
rules = pathlib.Path(tree, "rules.md")
text = rules.read_text()
if mode == "paste":
    rules.write_text(text + "- remember: " + {LEAKED!r} + "\\n")
elif mode == "double":
    rules.write_text(text + text)
else:
    rules.write_text("")
json.dump({{"summary": mode + " the rules"}}, open(out, "w"))
"""


def applier(mode: str) -> dict[str, Any]:
    escaped = APPLIER.replace("{", "{{").replace("}", "}}")
    return {"kind": "command", "argv": [sys.executable, "-c", escaped, mode, "{worktree}", "{output}"]}


def apply_record(fleet: Fleet, tuning: str) -> tuple[ApplyRecord, Path]:
    attempt = fleet.settings.store / "tunings" / tuning / "cases" / "c1" / "r1" / "nomem" / "1"
    found = read_model(attempt / "apply.json", ApplyRecord)
    assert found is not None
    return found, attempt


TUNINGS = {
    "leak-on": ("paste", {}),
    "leak-off": ("paste", {"leak_min_words": None}),
    "size-on": ("double", {"system_max_tokens": 10}),
    "size-off": ("double", {}),
    "collapse-on": ("empty", {}),
    "collapse-off": ("empty", {"edit_max_removed": None}),
}


async def test_each_guard_rejects_its_candidate_and_publishes_it_when_off(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Six tunings of one failing case each, a command applier pasting a held-out input, doubling or
    emptying the rules: with its guard on, the candidate is rejected (kept under its ref, guard.json and
    gate.json say why, the apply is `rejected`, the gate's rejected counter moves); with it off, published.
    The applier was given its size budget (`in/budget.json`); the analyzer of the next try is told of the
    leak."""
    fleet.start_worker(concurrency=6)
    for name, (mode, guards) in TUNINGS.items():
        root = tmp_path / name
        case_folder(root / "heldout", [SECRET])
        tuning = write_tuning(
            root,
            [case("c1", rules=["needed"])],
            name=name,
            tries=2,
            runner=demo_adapter(),
            analyzer=demo_adapter(),
            applier=applier(mode),
            guards=guards,
            holdout={"cases": "heldout"},
        )
        await fleet.start_tuning(tuning)
    for name in TUNINGS:
        await fleet.wait_finished(1, tuning=name, timeout_s=90)
    for name, (_, _) in TUNINGS.items():
        record, attempt = apply_record(fleet, name)
        if name.endswith("-off"):
            assert record.version is not None and not record.rejected, name
            continue
        assert record.rejected and record.gate is not None, name
        guard = read_model(attempt / "guard.json", GuardRejection)
        gate = read_model(attempt / "gate.json", GateRecord)
        assert guard is not None and gate is not None and gate.verdict == "rejected"
        assert guard.guard == name.removesuffix("-on") and gate.why == guard.why == record.gate.why
        assert gate.ref is not None and _ref_exists(fleet, name, gate.ref)
        async with fleet.client() as client:
            counts = await client.redis.hgetall(keys.stats(name))  # type: ignore[misc]
        assert int(counts[b"gates:rejected"]) == 1 and int(counts.get(b"gates:started", 0)) == 0
    history = VersionViews(Store(fleet.settings.store)).versions("leak-on")
    shown = [(row.status, row.gate.by if row.gate else None) for row in history.versions]
    assert shown == [("initial", None), ("rejected", "leak")]
    leak = read_model(apply_record(fleet, "leak-on")[1] / "guard.json", GuardRejection)
    assert leak is not None and leak.case == "secret" and "held-out case secret" in leak.why
    assert leak.words is not None and leak.words in LEAKED.lower()
    told = (apply_record(fleet, "leak-on")[1].parent / "2" / "analysis.md").read_text()
    assert "was rejected: leak: the edit copies 8 words of held-out case secret" in told
    (budget_file,) = apply_record(fleet, "size-on")[1].glob("apply-*/in/budget.json")
    budget = SizeBudget.model_validate_json(budget_file.read_text())
    assert budget.tokens_now == 8 and budget.system_max_tokens == 10 and budget.edit_max_removed_tokens == 4
    size = read_model(apply_record(fleet, "size-on")[1] / "guard.json", GuardRejection)
    assert size is not None and size.tokens_after == 2 * size.tokens_before > 10
    collapse = read_model(apply_record(fleet, "collapse-on")[1] / "guard.json", GuardRejection)
    assert (
        collapse is not None
        and collapse.tokens_after == 0
        and "collapse: the edit removes 100%" in collapse.why
    )


def _ref_exists(fleet: Fleet, tuning: str, ref: str) -> bool:
    repo = fleet.settings.store / "tunings" / tuning / "system.git"
    done = subprocess.run(["git", f"--git-dir={repo}", "rev-parse", "--verify", ref], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize(
    ("guards", "field"),
    [
        ({"leak_min_words": 2}, "guards.leak_min_words"),
        ({"edit_max_removed": 1.5}, "guards.edit_max_removed"),
        ({"system_max_tokens": 0}, "guards.system_max_tokens"),
        ({"collapse": 0.5}, "guards.collapse"),
    ],
)
def test_a_guard_value_out_of_range_is_refused_in_one_line(
    tmp_path: Path, guards: dict[str, Any], field: str
) -> None:
    """A guard's value out of range (or an unknown guard) is refused at load in one line naming the file
    and the field."""
    tuning = write_tuning(tmp_path, [case("c1")], guards=guards)
    with pytest.raises(ConfigError) as refused:
        load_tuning_file(tuning)
    message = str(refused.value)
    assert "\n" not in message and str(tuning) in message and field in message


def test_a_harmless_rule_passes_every_guard_on_the_demos_instructions() -> None:
    """Every guard on the demo's instructions against 200 cases whose inputs share a long passage: a new
    rule of the candidate's own words passes, again and again with one index. (What it costs is
    `bench guards`'s figure, against its target of 5 ms a candidate.)"""
    system = Path(__file__).resolve().parent.parent / "examples" / "demo" / "system"
    base = [p.read_text() for p in sorted(system.rglob("*")) if p.is_file()]
    assert base, "the demo's instructions"
    made = [*base[:-1], base[-1] + "\n- a new rule: answer in the user's language\n"]
    cases = [
        (
            Case(id=f"c{i}", input=f"Question {i}: " + LEAKED, rubric=[{"id": "r", "text": "cites it"}]),
            i % 5 == 0,
        )
        for i in range(200)
    ]
    index = LeakIndex(8, cases)
    config = GuardsConfig(system_max_tokens=100_000, edit_max_growth_tokens=1000)
    for _ in range(3):
        verdict, _ = check(config, base, made, index)
        assert verdict is None
