"""Every id the CLI takes is checked as a slug before it names a path: an evaluation or a goal planted
outside the store cannot be read, cancelled or written through `../` (issue 54, item 4)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, write_tuning
from tests.support.goals import goal_cli, start_goal, write_goal

OUTSIDE = "../../outside/{}"
"""From `<store>/evals/` or `<store>/goals/`: a folder beside the store."""


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.fixture
async def planted(fleet: Fleet, tmp_path: Path) -> Path:
    """A real evaluation and a real goal, copied as `x` and `g` to a folder beside the store."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a")]))
    async with fleet.client() as client:
        await client.evals.create("t1", name="real")
    await start_goal(fleet, write_goal(tmp_path / "goals"))
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(fleet.settings.store / "evals" / "real", outside / "x")
    shutil.copytree(fleet.settings.store / "goals" / "g1", outside / "g")
    return outside


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "show", OUTSIDE.format("x")],
        ["eval", "status", OUTSIDE.format("x")],
        ["eval", "results", OUTSIDE.format("x")],
        ["eval", "cancel", OUTSIDE.format("x")],
        ["eval", "compare", "real", OUTSIDE.format("x")],
        ["goal", "show", OUTSIDE.format("g")],
        ["goal", "status", OUTSIDE.format("g")],
        ["goal", "cancel", OUTSIDE.format("g")],
        ["report", "../outside"],
        ["results", "../outside"],
        ["show", "../outside", "a"],
        ["cancel", "../outside", "a"],
    ],
)
async def test_an_id_that_is_a_path_is_one_error_and_touches_nothing(
    fleet: Fleet, planted: Path, argv: list[str]
) -> None:
    """`tunefleet <command> ../../outside/…` exits non-zero with one `error:` line saying a slug was
    expected; nothing outside the store is read into the answer or written."""
    before = files_under(planted)
    done = (
        goal_cli(fleet, *argv[1:]) if argv[0] == "goal" else tunefleet(*argv, env=fleet_env(fleet.settings))
    )
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "safe slug" in lines[0], done.stderr
    assert "real" not in done.stdout and files_under(planted) == before
