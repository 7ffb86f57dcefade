"""The gate's parts that need no fleet: its config's errors at tuning load, its rule, and the re-base
decision on a real git repository (docs/architecture.md, "The acceptance gate")."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.client.tunings import load_tuning_file
from service.core.errors import ConfigError
from service.core.models.acceptance import GateConfig
from service.core.system import SystemRepo
from service.kinds.evals.gate.models import GateItem
from service.kinds.evals.gate.repo import rebase
from service.kinds.evals.gate.rule import judge
from tests.support.fleet import write_tuning


@pytest.mark.parametrize(
    ("gate", "field", "expected"),
    [
        ({"cases": "folder", "folder": "no-such"}, "gate.folder", "does not exist"),
        ({"cases": "both"}, "gate.folder", "need a folder"),
        ({"sample": 0}, "gate.sample", "expected at least 1, not 0"),
        ({"max_drop": 1.5}, "gate.max_drop", "expected at most 1, not 1.5"),
        ({"max_drop": -0.1}, "gate.max_drop", "expected at least 0, not -0.1"),
        ({"rule": "lenient"}, "gate.rule", "'strict', 'max_drop' or 'test'"),
        ({"rule": "max_drop"}, "gate.max_drop", "rule max_drop needs max_drop"),
        ({"rule": "test", "max_drop": 0.1}, "gate.max_drop", "only rule max_drop reads it"),
        ({"rule": "strict", "alpha": 0.1}, "gate.alpha", "only rule test reads it"),
        ({"max_drop": 0.1, "min_effect": 0.2}, "gate.min_effect", "only rule test reads it"),
        ({"rule": "strict", "max_repeats": 3}, "gate.max_repeats", "only rule test reads it"),
        ({"alpha": 0}, "gate.alpha", "expected more than 0, not 0"),
        ({"alpha": 0.5}, "gate.alpha", "less than 0.5"),
        ({"alpha": "often"}, "gate.alpha", "valid number"),
        ({"min_effect": 0}, "gate.min_effect", "expected more than 0, not 0"),
        ({"min_effect": 1}, "gate.min_effect", "less than 1"),
        ({"max_repeats": 0}, "gate.max_repeats", "expected at least 1, not 0"),
        ({"max_repeats": 1001}, "gate.max_repeats", "expected at most 1000, not 1001"),
        ({"repeats": 3, "max_repeats": 2}, "gate.max_repeats", "fewer than one round of repeats (3)"),
        ({"beta": 0}, "gate.beta", "expected more than 0, not 0"),
        ({"beta": 0.5}, "gate.beta", "less than 0.5"),
        ({"beta": "rarely"}, "gate.beta", "valid number"),
        ({"rule": "strict", "beta": 0.2}, "gate.beta", "only rule test reads it"),
        ({"own_case": "maybe"}, "gate.own_case", "valid boolean"),
    ],
)
def test_bad_gate_input_is_one_line_naming_the_field(
    tmp_path: Path, gate: dict[str, object], field: str, expected: str
) -> None:
    """A gate naming a missing folder, a sample of 0, a drop outside [0, 1], an unknown rule, a field its
    rule does not read, or an alpha, beta, min_effect, max_repeats or own_case out of range is refused
    at load in one line that names the file and the field."""
    path = write_tuning(tmp_path, [], gate=gate)
    with pytest.raises(ConfigError) as caught:
        load_tuning_file(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert field in message and expected in message


def test_a_good_gate_loads_with_its_folder_made_absolute(tmp_path: Path) -> None:
    """`gate:` with a regression folder relative to the tuning file loads with the folder resolved."""
    (tmp_path / "regress").mkdir()
    path = write_tuning(tmp_path, [], gate={"cases": "both", "folder": "regress", "max_drop": 0.1})
    config = load_tuning_file(path)
    assert config.gate is not None and config.gate.folder == (tmp_path / "regress").resolve()
    assert load_tuning_file(write_tuning(tmp_path / "off", [])).gate is None


def item(case: str, baseline: str | None, verdict: str | None) -> GateItem:
    return GateItem.model_validate({"case": case, "repeat": 1, "baseline": baseline, "verdict": verdict})


def test_the_rule_rejects_a_broken_pass_or_a_drop_past_the_limit() -> None:
    """Rule strict: one pair whose base run passed failing rejects; max_drop: only a larger drop rejects;
    items not graded are left out, and a gate with nothing graded rejects."""
    strict = GateConfig(rule="strict")
    items = [item("a", "pass", "pass"), item("b", "pass", "fail"), item("c", "fail", "pass")]
    assert judge(strict, items).verdict == "rejected" and judge(strict, items).broken == ["b"]
    assert judge(strict, [item("a", "pass", "pass"), item("b", "pass", None)]).verdict == "passed"
    lenient = GateConfig(max_drop=0.34)
    assert judge(lenient, items).verdict == "passed"  # 2/3 -> 2/3
    dropped = [item("a", "pass", "fail"), item("b", "pass", "pass"), item("c", "pass", "pass")]
    assert judge(lenient, dropped).verdict == "passed"  # 1.0 -> 0.67: a drop of 0.33
    assert judge(GateConfig(max_drop=0.3), dropped).verdict == "rejected"
    assert judge(strict, [item("a", "pass", None)]).verdict == "rejected"
    assert judge(strict, []).verdict == "passed"


async def _commit(repo: SystemRepo, base: str, edits: dict[str, str], tmp: Path) -> str:
    tree = await repo.private_copy(base, tmp)
    for name, text in edits.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    version = await repo.commit_folder(tree, base, f"edit {sorted(edits)}")
    assert version is not None
    return version


async def test_a_rebase_stands_on_other_files_reruns_on_a_shared_file_and_rejects_a_conflict(
    tmp_path: Path,
) -> None:
    """Re-applying a candidate on a newer version: edits to other files merge with no overlap (the verdict
    stands); edits to other lines of the same file merge with that file as the overlap (the gate runs
    again); edits to the same line conflict (the candidate is rejected)."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.md").write_text("one\ntwo\nthree\nfour\nfive\n")
    (source / "b.md").write_text("b\n")
    repo = SystemRepo(tmp_path / "repo.git", tmp_path / "snapshots")
    base = await repo.init_from(source)
    candidate = await _commit(repo, base, {"a.md": "ONE\ntwo\nthree\nfour\nfive\n"}, tmp_path / "w1")
    other_file = await _commit(repo, base, {"b.md": "B\n"}, tmp_path / "w2")
    other_line = await _commit(repo, base, {"a.md": "one\ntwo\nthree\nfour\nFIVE\n"}, tmp_path / "w3")
    same_line = await _commit(repo, base, {"a.md": "uno\ntwo\nthree\nfour\nfive\n"}, tmp_path / "w4")
    stands = await rebase(repo, candidate, base, other_file)
    assert stands.tree is not None and stands.overlap == []
    rerun = await rebase(repo, candidate, base, other_line)
    assert rerun.tree is not None and rerun.overlap == ["a.md"]
    conflict = await rebase(repo, candidate, base, same_line)
    assert conflict.tree is None and "a.md" in conflict.conflict
