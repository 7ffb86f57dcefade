"""YAML alias bombs and deep nesting are refused while the file is parsed, with one line naming it, by
`tunefleet submit`, `tunefleet goal start`, the daemon's reading of a tuning's `cases:` folder and of
its tuning file (issue 54, item 2); aliases that expand a little, as the example tunings use them,
still load."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from service.client.tunings import load_tuning_file
from service.core.io.documents import ALIAS_NODES_MAX
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.goals import goal_cli

BOMB_LEVELS = 5
"""Five levels of nine aliases expand to 9^5 = 59,049 nodes: past ALIAS_NODES_MAX, yet small enough
that a loader without the bound takes it (the test then fails) instead of exhausting the machine."""


def bomb(levels: int = BOMB_LEVELS) -> str:
    """A `demo:` mapping of `levels` levels, each a list of nine aliases to the level below."""
    lines = ["demo:", "  l0: &l0 [a, b]"]
    for level in range(1, levels + 1):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def bomb_case(path: Path) -> Path:
    body = yaml.safe_dump({k: v for k, v in case("bomb").items() if k != "demo"})
    path.write_text(body + bomb())
    return path


def one_error(stderr: str, path: Path) -> str:
    """The single line of a refusal (`error: …`, or `refused <file>: …` for a case), which names the
    file; no traceback."""
    (line,) = [line for line in stderr.splitlines() if line.strip()]
    assert line.startswith(("error:", "refused ")) and str(path) in line, stderr
    return line


def test_the_bomb_is_past_the_bound() -> None:
    """The test bomb expands past the alias bound (so the refusals below are the bound's)."""
    assert 9**BOMB_LEVELS > ALIAS_NODES_MAX


async def test_submit_refuses_an_alias_bomb_naming_the_file(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet submit` of a 500-byte case file whose aliases expand to 59,049 nodes exits non-zero
    within seconds, with one `error:` line naming the file and the aliases; nothing is enqueued."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    path = bomb_case(tmp_path / "bomb.yaml")
    began = time.monotonic()
    done = tunefleet("submit", str(path), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode != 0 and time.monotonic() - began < 20
    assert "aliases expand to more than" in one_error(done.stderr, path)
    assert "enqueued 0," in done.stdout


async def test_goal_start_refuses_an_alias_bomb_naming_the_file(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet goal start` of a goal spec holding the bomb exits non-zero with one line naming it."""
    path = tmp_path / "g1.yaml"
    path.write_text(yaml.safe_dump({"id": "g1", "goal": "finish"}) + bomb())
    done = goal_cli(fleet, "start", str(path))
    assert done.returncode != 0
    assert "aliases expand to more than" in one_error(done.stderr, path)


async def test_the_daemon_skips_a_bomb_in_its_cases_folder_and_queues_the_others(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A daemon whose tuning's `cases:` folder holds the bomb logs `case_refused` naming the file and
    queues the good case beside it."""
    tuning_file = write_tuning(tmp_path / "t", [case("good")])
    bomb_case(tmp_path / "t" / "cases" / "bomb.yaml")
    fleet.start_daemon(tuning_file)
    daemon_log = fleet.logs / "daemon.log"

    def refused() -> list[dict[str, object]]:
        lines = daemon_log.read_text().splitlines() if daemon_log.exists() else []
        events = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in events if e.get("event") == "case_refused"]

    await wait_until(lambda: bool(refused()), 60, "the daemon to refuse the bomb")
    (event,) = refused()
    assert str(event["file"]).endswith("bomb.yaml") and "aliases expand" in str(event["error"])
    await wait_until(lambda: "good" in fleet.results(), 30, "the good case to be submitted")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (bomb(), "aliases expand to more than"),
        ("runner: &r [1, *r]\n", "recursive document"),
        ("x: " + "[" * 500 + "]" * 500 + "\n", "nested deeper than"),
    ],
)
def test_a_tuning_file_past_a_bound_is_one_error_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    """A tuning file with a bomb, a recursive alias or 500 levels of brackets is refused by name."""
    path = tmp_path / "tuning.yaml"
    path.write_text("name: t1\n" + text)
    with pytest.raises(Exception) as caught:
        load_tuning_file(path)
    message = str(caught.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_aliases_that_share_an_adapter_still_load(tmp_path: Path) -> None:
    """A tuning that shares one adapter among three roles by an anchor, as the example tunings do, loads."""
    tuning_file = write_tuning(tmp_path / "t", [case("c1")])
    lines = ["name: t1", "system: system", "cases: cases", "runner: &demo", "  kind: demo", "  seed: 3"]
    tuning_file.write_text("\n".join([*lines, "analyzer: *demo", "applier: *demo"]) + "\n")
    config = load_tuning_file(tuning_file)
    assert config.runner == config.analyzer == config.applier
