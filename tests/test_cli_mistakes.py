"""The CLI says so when given a mistake, in one `error:` line, and exits non-zero (issue 12, item 10)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from service.core.errors import CaseFileError
from service.core.models.case import SLUG_PATTERN
from service.core.settings import FleetSettings
from service.kinds.cases.files import load_case
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, settings_env, write_tuning


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def states(fleet: Fleet) -> set[str]:
    return {row.state for row in fleet.results().values()}


async def test_submitting_a_missing_path_is_an_error_naming_it(fleet: Fleet, tmp_path: Path) -> None:
    """`submit` of a path that does not exist prints one `error:` line naming it and exits non-zero."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    missing = tmp_path / "no-such-folder"
    done = tunefleet("submit", str(missing), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode != 0, done.stdout
    assert len(error_lines(done.stderr)) == 1 and str(missing) in done.stderr
    assert "enqueued" not in done.stdout


async def test_submitting_a_folder_without_case_files_is_an_error_naming_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`submit` of a folder holding no case file prints one `error:` line naming it and exits non-zero."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a case\n")
    done = tunefleet("submit", str(empty), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode != 0, done.stdout
    assert len(error_lines(done.stderr)) == 1 and str(empty) in done.stderr
    assert "enqueued" not in done.stdout


async def test_cancelling_an_unknown_case_is_an_error(fleet: Fleet, tmp_path: Path) -> None:
    """`cancel TUNING CASE` of a case the tuning lacks names it in an `error:` line and exits non-zero."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c0")]))
    done = tunefleet("cancel", "t1", "no-such-case", env=fleet_env(fleet.settings))
    assert done.returncode != 0, done.stdout
    assert len(error_lines(done.stderr)) == 1 and "no-such-case" in done.stderr
    assert states(fleet) == {"unfinished"}


async def test_cancelling_in_an_unknown_tuning_is_an_error(fleet: Fleet, tmp_path: Path) -> None:
    """`cancel TUNING CASE` of an unregistered tuning names it in an `error:` line and exits non-zero."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c0")]))
    done = tunefleet("cancel", "no-such-tuning", "c0", env=fleet_env(fleet.settings))
    assert done.returncode != 0, done.stdout
    assert len(error_lines(done.stderr)) == 1 and "no-such-tuning" in done.stderr


async def test_cancelling_a_tuning_without_a_terminal_needs_yes(fleet: Fleet, tmp_path: Path) -> None:
    """`cancel TUNING` with stdin not a terminal refuses, saying how many cases, unless `--yes` is given."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{i}") for i in range(3)]))
    refused = tunefleet("cancel", "t1", env=fleet_env(fleet.settings))
    assert refused.returncode != 0, refused.stdout
    assert len(error_lines(refused.stderr)) == 1 and "3 unfinished case(s)" in refused.stderr
    assert "--yes" in refused.stderr
    assert states(fleet) == {"unfinished"}
    done = tunefleet("cancel", "t1", "--yes", env=fleet_env(fleet.settings))
    assert done.returncode == 0, done.stderr
    assert "cancelled 3 case(s)" in done.stdout
    assert states(fleet) == {"cancelled"}


def _talk(settings: FleetSettings, answer: bytes, *args: str) -> tuple[int, str]:
    """`tunefleet ARGS` on a pseudo-terminal, its first question answered with `answer`: (code, output)."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", *args],
        env={**os.environ, **settings_env(settings), "COLUMNS": "200"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    answered = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            if not answered and b"?" in output:
                os.write(leader, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        return proc.wait(timeout=10), output.decode(errors="replace")
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("answer", "code", "state"), [(b"n\n", 1, "unfinished"), (b"y\n", 0, "cancelled")])
async def test_cancelling_a_tuning_on_a_terminal_asks_first(
    fleet: Fleet, tmp_path: Path, answer: bytes, code: int, state: str
) -> None:
    """`cancel TUNING` on a terminal asks, naming how many cases, and cancels only when the answer is yes."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{i}") for i in range(2)]))
    returncode, output = _talk(fleet.settings, answer, "cancel", "t1")
    assert "2 unfinished case(s)" in output and returncode == code, output
    assert states(fleet) == {state}


async def test_refusals_print_the_id_pattern_as_is(fleet: Fleet, tmp_path: Path) -> None:
    """A refused file's message prints brackets such as `[a-z0-9]` literally, not as rich markup."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "bad.yaml").write_text(yaml.safe_dump({**case("ok"), "id": "Bad Id"}))
    done = tunefleet("submit", str(incoming), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 1, done.stderr
    assert SLUG_PATTERN in "".join(done.stderr.split()), done.stderr


async def test_a_folder_named_like_markup_does_not_crash_submit(fleet: Fleet, tmp_path: Path) -> None:
    """`submit` of a missing folder named `m[/b]` prints its name as is in one `error:` line, no traceback."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    odd = tmp_path / "m[/b]"
    done = tunefleet("submit", str(odd), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr
    assert len(error_lines(done.stderr)) == 1 and "m[/b]" in done.stderr


async def test_a_bad_file_in_a_folder_named_like_markup_is_refused_as_is(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A bad file below a folder named `m[/b]` is refused by its path, printed as is; the good one goes in."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    odd = tmp_path / "m[/b]"
    odd.mkdir(parents=True)
    (odd / "broken.yaml").write_text("id: broken\ninput: [unclosed\n")
    (odd / "good.yaml").write_text(yaml.safe_dump(case("good")))
    done = tunefleet("submit", str(odd), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "m[/b]" in done.stderr and "broken.yaml" in done.stderr
    assert "enqueued 1" in done.stdout


def test_a_case_file_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    """A non-UTF-8 case file is refused as a CaseFileError naming the file, '(file)' and 'not UTF-8 text'."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(case("latin")).replace("Question", "Qu\xe9stion").encode("latin-1"))
    with pytest.raises(CaseFileError) as caught:
        load_case(path)
    assert caught.value.path == str(path) and caught.value.field == "(file)"
    assert "not UTF-8 text" in str(caught.value)


async def test_submit_refuses_a_non_utf8_file_and_enqueues_the_rest(fleet: Fleet, tmp_path: Path) -> None:
    """`submit` of a folder with a non-UTF-8 file refuses that file by name and enqueues the others."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", []))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "latin1.yaml").write_bytes("id: latin\ninput: Qu\xe9stion\n".encode("latin-1"))
    (incoming / "good.yaml").write_text(yaml.safe_dump(case("good")))
    done = tunefleet("submit", str(incoming), "--tuning", "t1", env=fleet_env(fleet.settings))
    assert done.returncode == 1, done.stderr
    assert "latin1.yaml" in done.stderr and "not UTF-8 text" in done.stderr
    assert "enqueued 1" in done.stdout and "Traceback" not in done.stderr
