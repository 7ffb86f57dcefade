"""Bad input is refused naming the file, the field and what was expected; nothing else is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.client.tunings import load_tuning_file
from service.core.errors import CaseFileError, ConfigError, StoreError
from service.core.io.files import read_model
from service.core.models.records import CaseResult
from service.core.models.tuning import LlmAdapter
from service.kinds.cases.files import load_case
from service.kinds.goals.spec import load_goal_file
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, write_tuning

BAD_FILES = {
    "dotdot.yaml": ({**case("ok"), "id": "../x"}, "'id'"),
    "absolute.yaml": ({**case("ok"), "id": "/etc/passwd"}, "'id'"),
    "no-rubric.yaml": ({k: v for k, v in case("no-rubric").items() if k != "rubric"}, "'rubric'"),
    "dup-rubric.yaml": (
        {**case("dup"), "rubric": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]},
        "'rubric'",
    ),
}


def write_bad_cases(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (content, _) in BAD_FILES.items():
        (folder / name).write_text(yaml.safe_dump(content))
    (folder / "broken.yaml").write_text("id: broken\ninput: [unclosed\n")
    (folder / "good.yaml").write_text(yaml.safe_dump(case("good")))


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_malformed_case_file_names_the_file_and_the_field(tmp_path: Path, name: str) -> None:
    """Unsafe ids, a missing rubric and duplicate rubric ids are each refused naming file and field."""
    write_bad_cases(tmp_path)
    with pytest.raises(CaseFileError) as caught:
        load_case(tmp_path / name)
    message = str(caught.value)
    assert str(tmp_path / name) in message and BAD_FILES[name][1] in message


def test_invalid_yaml_names_the_file_and_the_position(tmp_path: Path) -> None:
    """A case file that is not YAML is refused with its path and where the parser stopped."""
    write_bad_cases(tmp_path)
    with pytest.raises(CaseFileError) as caught:
        load_case(tmp_path / "broken.yaml")
    assert str(tmp_path / "broken.yaml") in str(caught.value) and "valid YAML" in str(caught.value)


def test_an_unsafe_id_explains_what_a_safe_one_is(tmp_path: Path) -> None:
    """The message for a path-like id says what a safe id looks like."""
    write_bad_cases(tmp_path)
    with pytest.raises(CaseFileError, match="safe slug"):
        load_case(tmp_path / "dotdot.yaml")


async def test_submit_refuses_bad_files_and_enqueues_the_rest(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet submit` with bad files exits 1, names each bad file, and enqueues the good one."""
    tuning = write_tuning(tmp_path / "t", [case("first")])
    await fleet.start_tuning(tuning)
    write_bad_cases(tmp_path / "incoming")
    done = tunefleet("submit", str(tmp_path / "incoming"), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 1, done.stderr
    for name in [*BAD_FILES, "broken.yaml"]:
        assert name in done.stderr
    assert "enqueued 1" in done.stdout
    cases_dir = fleet.settings.store / "tunings" / "t1" / "cases"
    assert sorted(p.name for p in cases_dir.iterdir()) == ["first", "good"]
    async with fleet.client() as client:
        status = await client.status()
    assert status.tunings[0].submitted == 2 and status.queue_depth == 2


def test_a_tuning_file_with_a_bad_field_names_it(tmp_path: Path) -> None:
    """A tuning file with an out-of-range field is refused naming the file and the field."""
    path = write_tuning(tmp_path, [case("a")], tries=0)
    with pytest.raises(ConfigError) as caught:
        load_tuning_file(path)
    assert str(path) in str(caught.value) and "'tries'" in str(caught.value)


def test_a_tuning_with_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    """An argv template naming a placeholder the role does not have is refused when the tuning is read."""
    runner = {"kind": "command", "argv": ["agent", "--in", "{inptu}"]}
    path = write_tuning(tmp_path, [case("a")], runner=runner)
    with pytest.raises(
        ConfigError, match=r"field 'runner.argv\[2\]': unknown placeholder \{inptu\}; did you mean 'input'\?"
    ):
        load_tuning_file(path)


def test_an_llm_adapters_own_prompts_are_found_beside_the_tuning_file(tmp_path: Path) -> None:
    """Prompt templates named relative to the tuning file are read from beside it, whatever the cwd."""
    llm = {"kind": "llm", "model": "m", "api_key_env": None, "prompts": {"analyze": "prompts/grade.md"}}
    path = write_tuning(tmp_path, [case("a")], analyzer=llm)
    config = load_tuning_file(path)
    assert isinstance(config.analyzer, LlmAdapter)
    assert config.analyzer.prompts["analyze"] == tmp_path.resolve() / "prompts" / "grade.md"


def test_every_file_reader_words_a_bad_field_alike(tmp_path: Path) -> None:
    """A tuning file, a case file, a goal spec and a stored record each name the file, the field's path
    and what was expected, in the one wording of service.core.validation."""
    tuning = write_tuning(tmp_path / "tuning", [case("a")], tries=0)
    case_file = tmp_path / "case.yaml"
    case_file.write_text(yaml.safe_dump({**case("c"), "rubric": [{"id": "r1", "text": ""}]}))
    goal_file = tmp_path / "goal.yaml"
    goal_file.write_text(yaml.safe_dump({"id": "g", "goal": "x", "limits": {"max_iterations": 0}}))
    record = tmp_path / "result.json"
    record.write_text('{"case": "c", "rev": "one"}')
    messages = {}
    with pytest.raises(ConfigError) as caught:
        load_tuning_file(tuning)
    messages["tuning"] = (str(caught.value), tuning, "tries")
    with pytest.raises(CaseFileError) as bad_case:
        load_case(case_file)
    messages["case"] = (str(bad_case.value), case_file, "rubric.0.text")
    with pytest.raises(ConfigError) as bad_goal:
        load_goal_file(goal_file)
    messages["goal"] = (str(bad_goal.value), goal_file, "limits.max_iterations")
    with pytest.raises(StoreError) as bad_record:
        read_model(record, CaseResult)
    messages["record"] = (str(bad_record.value), record, "rev")
    for what, (message, path, field) in messages.items():
        assert message.startswith(f"{path}: field {field!r}: "), f"{what}: {message}"
        assert message.split(f"field {field!r}: ")[1], f"{what}: nothing said of what was expected"


def test_one_module_reads_validation_errors() -> None:
    """No production module but service/core/validation.py takes a ValidationError's errors apart."""
    root = Path(__file__).resolve().parents[1]
    readers = [
        str(path.relative_to(root))
        for package in ("service", "workers")
        for path in sorted((root / package).rglob("*.py"))
        if ".errors()" in path.read_text(encoding="utf-8")
    ]
    assert readers == ["service/core/validation.py"]
