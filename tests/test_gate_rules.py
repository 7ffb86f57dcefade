"""The gate's parts that need no fleet: its config's errors at tuning load, its rule, and the re-base
decision on a real git repository (docs/architecture.md, "The acceptance gate")."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.client.tunings import load_tuning_file
from service.core.errors import ConfigError
from service.core.system import SystemRepo
from service.gate.config import GateConfig
from service.gate.models import GateItem
from service.gate.repo import rebase
from service.gate.rule import judge
from tests.support.fleet import write_tuning


@pytest.mark.parametrize(
    ("gate", "field", "expected"),
    [
        ({"cases": "folder", "folder": "no-such"}, "gate.folder", "does not exist"),
        ({"cases": "both"}, "gate.folder", "need a folder"),
        ({"sample": 0}, "gate.sample", "greater than or equal to 1"),
        ({"max_drop": 1.5}, "gate.max_drop", "less than or equal to 1"),
        ({"max_drop": -0.1}, "gate.max_drop", "greater than or equal to 0"),
    ],
)
def test_bad_gate_input_is_one_line_naming_the_field(
    tmp_path: Path, gate: dict[str, object], field: str, expected: str
) -> None:
    """A gate naming a missing folder, a sample of 0 or a drop outside [0, 1] is refused at load in one
    line that names the file and the field."""
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
    """No max_drop: one passed case failing rejects; max_drop: only a larger drop rejects; items not
    graded are left out, and a gate with nothing graded rejects."""
    strict = GateConfig()
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
