"""`tunefleet check`: a tuning file and its cases checked with no Redis, every problem at once, in plain
words; the daemon refuses a bad tuning file before it contacts Redis (issue 53)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from service.client.check import check, min_flips
from tests.support.cli import tunefleet
from tests.support.fleet import Fleet, case, settings_env, write_tuning

NO_REDIS = {"TUNEFLEET_REDIS_URL": "redis://127.0.0.1:1/0", "TUNEFLEET_LOG_FORMAT": "json"}
"""A Redis address where nothing listens: a command that needed Redis would fail on it."""

PYDANTIC_WORDS = ("Value error", "Extra inputs", "(top level)", "Field required", "Input should", "Input tag")


def command(*argv: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "command", "argv": list(argv), **extra}


def broken_tuning(root: Path) -> Path:
    """A tuning folder with the issue's mistakes and more, each in its own field or file."""
    typo = {("rubrics" if key == "rubric" else key): value for key, value in case("typo").items()}
    path = write_tuning(root, [case("good"), typo])
    body = yaml.safe_load(path.read_text())
    body.pop("analyzer")
    body.update(
        {
            "cases": "case",  # 1. a folder that is not there (cases:)
            "anaylzer": {"kind": "demo"},  # 2. a near-miss key
            "runner": command("python3", "run.py", "--out", "{ouput}", timout_s=30),  # 3, 4
            "applier": command(
                "python3", "edit.py", "{worktre}", "{output}"
            ),  # 5. the same typo, another role
            "tries": 0,  # 6. out of range
            "mem_tries": "two",  # 7. not a number
            "budget": {"case_max_usd": -1},  # 8. out of range, nested
            "holdout": {"fraction": 0.2, "cases": "held"},  # 9. both sources
        }
    )
    path.write_text(yaml.safe_dump(body))
    bad = root / "cases" / "bad.yaml"
    bad.write_text(yaml.safe_dump({"id": "Bad Id", "input": "", "rubric": [{"id": "r1", "text": "x"}]}))
    return path


def test_a_broken_tuning_is_reported_whole_in_plain_words(tmp_path: Path) -> None:
    """`check` prints every error of a tuning file and of its cases in one run, each naming the file and
    the field, with "did you mean" for near misses and no pydantic wording, traceback, nor Redis."""
    path = broken_tuning(tmp_path / "t")
    done = tunefleet("check", str(path), str(tmp_path / "t" / "cases"), env={**os.environ, **NO_REDIS})
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    expected = {
        "'cases': folder": str(path),
        "'anaylzer': unknown key; did you mean 'analyzer'?": str(path),
        "'runner.timout_s': unknown key; did you mean 'timeout_s'?": str(path),
        "'runner.argv[3]': unknown placeholder {ouput}; did you mean 'output'?": str(path),
        "'applier.argv[2]': unknown placeholder {worktre}; did you mean 'worktree'?": str(path),
        "'tries': expected at least 1, not 0": str(path),
        "'mem_tries': expected a valid integer, not 'two'": str(path),
        "'budget.case_max_usd': expected more than 0, not -1": str(path),
        "'holdout': give either": str(path),
        "'holdout.cases': folder": str(path),
        "'rubrics': unknown key; did you mean 'rubric'?": "typo.yaml",
        "'rubric': missing (required); is 'rubrics' meant to be it?": "typo.yaml",
        "'id': expected a safe slug": "bad.yaml",
        "'input': expected text with at least 1 character": "bad.yaml",
    }
    for words, file in expected.items():
        found = [line for line in lines if words in line]
        assert len(found) == 1 and file in found[0], (words, done.stdout)
    assert len(lines) == len(expected), done.stdout
    for word in (*PYDANTIC_WORDS, "Traceback"):
        assert word not in done.stdout + done.stderr, word
    assert done.stdout.splitlines()[-1].startswith(f"refused: {path}: {len(expected)} error(s)")


def test_a_runner_that_names_no_output_is_refused_and_the_others_warned(tmp_path: Path) -> None:
    """A runner argv without {output} is an error (every run would be void); an analyzer without {feedback}
    and an applier without {worktree} are warnings, as is a script the agent's folder does not hold."""
    path = write_tuning(
        tmp_path / "t",
        [case("c1")],
        runner=command("python3", "run.py", "{input}"),
        analyzer=command("python3", "grade.py", "{run}"),
        applier=command("python3", "edit.py", "{output}"),
    )
    (tmp_path / "t" / "grade.py").write_text("")
    report = check(path)
    said = {(f.level, f.field, f.text.split(":")[0]) for f in report.findings}
    assert said == {
        ("error", "runner.argv", "names no {output}"),
        ("warning", "analyzer.argv", "names no {feedback}"),
        ("warning", "applier.argv", "names no {worktree}"),
        (
            "warning",
            "runner.argv[1]",
            "run.py is not in the runner's working directory " + str(tmp_path / "t"),
        ),
        (
            "warning",
            "applier.argv[1]",
            "edit.py is not in the applier's working directory " + str(tmp_path / "t"),
        ),
    }, report.findings


def test_a_held_out_split_too_small_to_tell_versions_apart_is_warned(tmp_path: Path) -> None:
    """A held-out split smaller than the fewest cases a paired test needs says no difference can be beyond
    chance, a middling one the smallest gain that can be, and a large one nothing; no split over many
    cases says evaluations measure the cases tuned on."""
    needed = min_flips()
    assert needed == 6  # the exact two-sided McNemar test at 5 %: 2 * 0.5**6 < 0.05 <= 2 * 0.5**5
    texts = {}
    for held in (2, 10, 30):
        root = tmp_path / f"h{held}"
        path = write_tuning(root, [case(f"c{i}") for i in range(12)], holdout={"cases": "held"})
        (root / "held").mkdir()
        for i in range(held):
            (root / "held" / f"h{i}.yaml").write_text(yaml.safe_dump(case(f"h{i}")))
        texts[held] = [f.text for f in check(path).findings if f.field == "holdout.cases"]
    assert texts[2] and "no difference between two versions can be beyond chance" in texts[2][0]
    assert texts[10] and "at least 6 of them (60%)" in texts[10][0]
    assert texts[30] == []
    plain = write_tuning(tmp_path / "none", [case(f"c{i}") for i in range(12)])
    assert [f.field for f in check(plain).findings] == ["holdout"]


def test_the_example_tunings_pass_the_check(tmp_path: Path) -> None:
    """Every tuning the repository ships passes `check` (warnings allowed)."""
    root = Path(__file__).resolve().parents[1] / "examples"
    for name in ("demo", "llm-demo", "agents"):
        done = tunefleet("check", str(root / name / "tuning.yaml"), env={**os.environ, **NO_REDIS})
        assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("ok: "), done.stdout


def test_the_daemon_refuses_a_bad_tuning_before_contacting_redis(tmp_path: Path) -> None:
    """`daemon --once` on a tuning file with mistakes names all of them and exits 2 without trying Redis
    (whose address here answers nothing), so another daemon on the fleet never hides them."""
    path = broken_tuning(tmp_path / "t")
    done = tunefleet("daemon", "--once", str(path), env={**os.environ, **NO_REDIS})
    assert done.returncode == 2, done.stderr
    record = json.loads(done.stderr.strip().splitlines()[-1])
    message = record["error"]
    assert "anaylzer" in message and "applier.argv[2]" in message and "field 'cases'" in message, message
    assert "Redis" not in done.stderr and "Traceback" not in done.stderr


async def test_a_tuning_refused_at_start_is_not_left_in_status(fleet: Fleet, tmp_path: Path) -> None:
    """A tuning whose `cases:` folder is missing is refused by the daemon, named by that field, and never
    appears in `status` (no tuning registered with 0 cases)."""
    path = write_tuning(tmp_path / "t", [case("c1")], name="ghost")
    body = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**body, "cases": "no-such-folder"}))
    env = {**settings_env(fleet.settings), "TUNEFLEET_LOG_FORMAT": "console"}
    done = tunefleet("daemon", "--once", str(path), env={**os.environ, **env})
    assert done.returncode == 2 and "field 'cases': folder" in done.stderr, done.stderr
    status = tunefleet("status", "--json", env={**os.environ, **env})
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tunings"] == []
    assert not (fleet.settings.store / "tunings" / "ghost").exists()


def test_submit_refuses_a_case_naming_every_problem(tmp_path: Path) -> None:
    """A case file with three mistakes is refused (as `submit` and the daemon refuse it) in one line that
    names all three fields, the near miss with its "did you mean"."""
    from service.core.errors import CaseFileError
    from service.kinds.cases.files import load_case

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"id": "Bad Id", "input": "", "rubrics": [{"id": "r1", "text": "x"}]}))
    try:
        load_case(path)
    except CaseFileError as exc:
        message = str(exc)
    else:
        raise AssertionError("the case was accepted")
    assert "\n" not in message and message.startswith(f"{path}: field 'id': expected a safe slug")
    for words in ("field 'input': expected text", "field 'rubric': missing", "did you mean 'rubric'?"):
        assert words in message, message
