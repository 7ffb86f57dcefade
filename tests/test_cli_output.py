"""The CLI's tables read whole in a pipe, as TSV on request, and fit a terminal of 120 columns (issue 12,
item 11); the demo's progress line stands apart from the result table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from service.cli.render import results_table
from service.client.queries import results
from service.core.store import Store
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, write_tuning

LONG_ID = "a-case-whose-identifier-is-long-enough-to-be-cut-in-eighty-columns"
CASES = [
    case(LONG_ID),
    case("flawed", flawed=True),
    case("structural", rules=["structural-a"], structural=True),
]


def json_env(fleet: Fleet, **more: str) -> dict[str, str]:
    """The fleet's settings as the environment, logs as JSON lines."""
    return fleet_env(fleet.settings, TUNEFLEET_LOG_FORMAT="json", **more)


@pytest.fixture
async def finished(fleet: Fleet, tmp_path: Path) -> Fleet:
    """Three cases with a long id and long reasons, run to their end by a real worker."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES))
    fleet.start_worker(concurrency=3)
    await fleet.wait_finished(len(CASES))
    return fleet


async def test_a_pipe_gets_whole_values(finished: Fleet) -> None:
    """`results` and `status` into a pipe print every id, reason and header whole, however long."""
    rows = finished.results()
    reasons = [r.reason for r in rows.values() if r.reason]
    assert len(reasons) == 2 and all(len(reason) > 36 for reason in reasons)
    shown = tunefleet("results", "t1", env=json_env(finished), timeout_s=120, check=True).stdout
    assert LONG_ID in shown and "…" not in shown
    for reason in reasons:
        assert reason in shown
    status = tunefleet("status", env=json_env(finished), timeout_s=120, check=True).stdout
    assert "…" not in status
    for header in ("submitted", "waiting", "completed", "difficult", "cancelled", "tokens"):
        assert header in status


async def test_tsv_gives_one_line_per_case(finished: Fleet) -> None:
    """`results --format tsv` prints a header and one tab-separated line per case with every value whole;
    `status --format tsv` one line per tuning."""
    lines = tunefleet(
        "results", "t1", "--format", "tsv", env=json_env(finished), timeout_s=120, check=True
    ).stdout.splitlines()
    header, *body = (line.split("\t") for line in lines)
    assert header[:6] == ["case", "rev", "state", "reason", "tokens", "cost_usd"]
    by_case = {cells[0]: dict(zip(header, cells, strict=True)) for cells in body}
    assert set(by_case) == {c["id"] for c in CASES}
    for row in finished.results().values():
        assert by_case[row.case]["state"] == row.state
        assert by_case[row.case]["reason"] == (row.reason or "")
        assert int(by_case[row.case]["tokens"]) == row.tokens
    status_header, tuning = (
        line.split("\t")
        for line in tunefleet(
            "status", "--format", "tsv", env=json_env(finished), timeout_s=120, check=True
        ).stdout.splitlines()
    )
    status = dict(zip(status_header, tuning, strict=True))
    assert (status["tuning"], status["submitted"], status["completed"], status["difficult"]) == (
        "t1",
        "3",
        "1",
        "2",
    )


async def test_results_fit_a_terminal_of_120_columns(finished: Fleet) -> None:
    """In a 120-column terminal the results table stays within 120 columns and cuts no id, state or count
    (the reason wraps)."""
    rows = results(Store(finished.settings.store).tuning("t1"))
    console = Console(width=120, force_terminal=True, color_system=None, record=True)
    console.print(results_table(rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "…" not in text
    for row in rows:
        assert row.case in text and row.state in text and f"{row.tokens:,}" in text


async def test_the_demo_progress_line_stands_apart(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet demo` ends its live view with `N/N cases finished` on a line of its own, then a blank line,
    then the result table."""
    tuning = write_tuning(tmp_path / "t", [case("pass"), case("also-passes")])
    no_goals = tmp_path / "no-goals"
    no_goals.mkdir()
    demo = ["demo", "--tuning", str(tuning), "--workers", "1", "--goals", str(no_goals)]
    out = tunefleet(*demo, env=json_env(fleet), timeout_s=120, check=True).stdout.splitlines()
    at = out.index("2/2 cases finished")
    assert out[at + 1] == ""
    assert out[at + 2].startswith("┏")


DEVELOPER_WORDS = ("import", "package", "python -m", "module", "noqa", "TODO")


HELP_READER = """
import json, sys
from typer.testing import CliRunner
from service.cli.main import app
out = []
for args in json.loads(sys.argv[1]):
    done = CliRunner().invoke(app, [*args, "--help"], prog_name="tunefleet")
    assert done.exit_code == 0, (args, done.output)
    out.append([args, done.stdout])
print(json.dumps(out))
"""


def test_help_texts_speak_to_users() -> None:
    """`tunefleet --help` and every command's `--help` give each command and argument a help text, and
    none carries a developer's note (imports, packages, modules)."""
    from service.cli.main import app

    commands = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    assert len(commands) >= 12
    # One process reads every --help (the CLI's callback configures logging: not in the tests' own).
    helps = json.loads(
        subprocess.run(
            [sys.executable, "-c", HELP_READER, json.dumps([[], *([name] for name in commands)])],
            env={**os.environ, "COLUMNS": "200", "TUNEFLEET_LOG_FORMAT": "console"},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    for args, text in helps:
        for word in DEVELOPER_WORDS:
            assert word not in text, (args, word, text)
        assert not re.search(r"<[\w\[\], ]+>\s+\[required\]", text), (args, text)
        if not args:
            for name in commands:
                assert re.search(rf"│ {name}\s+\S", text), (name, text)
