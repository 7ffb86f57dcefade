"""What a command agent leaves where the fleet reads its result (its output, feedback, report, log) is
read only if it is a regular file of a sane size: a link is never followed (it could point at a key the
worker can read and the agent cannot), and a named pipe or a device is never opened for reading (a read
that never ends would hold the worker's event loop, and every case of the worker with it). Real
workers, real agent processes."""

from __future__ import annotations

import json
from pathlib import Path

from service.core.io.files import read_model
from service.core.models.records import RunRecord
from tests.support.fleet import Fleet, wait_until
from tests.test_command_loop import case_root, inline, start_one_case
from workers.adapters.folder import StepFolder

SECRET = "SECRET-KEY-41c9"

LINKING_RUNNER = """
import os, sys
os.symlink(sys.argv[1], sys.argv[2])
"""

PIPE_ANALYZER = """
import os, sys
os.mkfifo(sys.argv[1])
"""

LINKED_OUT_ANALYZER = """
import os, pathlib, sys
out = pathlib.Path(sys.argv[2]).parent
os.rename(out, out.with_name("out.mine"))
os.symlink(sys.argv[1], out)
"""

LOG_LINKING_ANALYZER = """
import os, pathlib, sys
feedback = pathlib.Path(sys.argv[2])
step = feedback.parent.parent
if not (step / "round-1").exists():  # the first round: the log becomes a link to the worker's file
    (step / "round-1").write_text("done")
    os.unlink(step / "analyze.log")
    os.symlink(sys.argv[1], step / "analyze.log")
else:
    print("APPENDED-BY-THE-AGENT", flush=True)
feedback.write_text("not json")  # invalid: the step asks again, in a second round
"""

PIPE_LOG_RUNNER = """
import json, os, pathlib, sys
output = pathlib.Path(sys.argv[1])
log = output.parent.parent / "run.log"
os.unlink(log)
os.mkfifo(log)
output.write_text(json.dumps({"answer": "done", "turns": 1}))
sys.exit(3)
"""


def first_run(fleet: Fleet) -> RunRecord | None:
    return read_model(case_root(fleet) / "nomem" / "1" / "run.json", RunRecord)


async def test_a_runner_output_linked_to_a_secret_is_not_read(fleet: Fleet, tmp_path: Path) -> None:
    """A runner that links its output to a file the worker can read (a valid output holding a secret):
    the run is recorded with an error naming the link, and the secret is nowhere in the record."""
    secret = tmp_path / "worker-only.json"
    secret.write_text(json.dumps({"answer": SECRET, "turns": 1}))
    await start_one_case(fleet, tmp_path, runner=inline(LINKING_RUNNER, str(secret), "{output}"))
    await wait_until(lambda: first_run(fleet) is not None, 30, "the first run's record")
    run = first_run(fleet)
    assert run is not None and run.output.error is not None
    assert "output.json is a symbolic link (not followed)" in run.output.error
    assert SECRET not in (case_root(fleet) / "nomem" / "1" / "run.json").read_text()


async def test_feedback_that_is_a_pipe_fails_the_case_and_the_worker_goes_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    """An analyzer that leaves a named pipe for its feedback: the fleet does not open it for reading (no
    writer would ever come), the case ends failed naming the file, and the worker is still up."""
    await start_one_case(fleet, tmp_path, analyzer=inline(PIPE_ANALYZER, "{feedback}"))
    rows = await fleet.wait_finished(1, timeout_s=60)
    assert rows["c1"].state == "failed"
    assert "feedback.json is not a regular file" in (rows["c1"].reason or "")
    assert fleet.workers[0].poll() is None


async def test_an_out_folder_replaced_by_a_link_is_not_read_through(fleet: Fleet, tmp_path: Path) -> None:
    """An analyzer that swaps its `out/` folder for a link to another folder holding a passing feedback
    (as a folder of the worker's could): the fleet reads nothing through the link, and the case ends
    failed naming the folder, not graded by the planted file."""
    planted = tmp_path / "elsewhere"
    planted.mkdir()
    passing = {"verdict": "pass", "done": True, "rubric": {"r1": 1.0}, "summary": "planted"}
    (planted / "feedback.json").write_text(json.dumps(passing))
    await start_one_case(fleet, tmp_path, analyzer=inline(LINKED_OUT_ANALYZER, str(planted), "{feedback}"))
    rows = await fleet.wait_finished(1, timeout_s=60)
    assert rows["c1"].state == "failed"
    assert "out/ is not a folder (a link is not followed)" in (rows["c1"].reason or "")


async def test_a_log_replaced_by_a_link_is_never_written_through(fleet: Fleet, tmp_path: Path) -> None:
    """An analyzer that puts a link to a file of the worker's (say its authorized keys) in its log's
    place: its next round's output goes to a new log of the worker's, never appended to that file."""
    victim = tmp_path / "authorized_keys"
    victim.write_text("the worker's own line\n")
    await start_one_case(fleet, tmp_path, analyzer=inline(LOG_LINKING_ANALYZER, str(victim), "{feedback}"))
    rows = await fleet.wait_finished(1, timeout_s=60)
    assert rows["c1"].state == "failed"
    assert victim.read_text() == "the worker's own line\n"
    logs = list(case_root(fleet).glob("nomem/1/analyze-*/analyze.log"))
    assert len(logs) == 1 and not logs[0].is_symlink()
    assert "APPENDED-BY-THE-AGENT" in logs[0].read_text()


async def test_a_log_replaced_by_a_pipe_gives_no_tail_and_no_hang(fleet: Fleet, tmp_path: Path) -> None:
    """A runner that puts a named pipe in its log's place and fails: the fleet reads no tail from it
    (it would wait for a writer for ever) and records the run with its exit code."""
    await start_one_case(fleet, tmp_path, runner=inline(PIPE_LOG_RUNNER, "{output}"))
    await wait_until(lambda: first_run(fleet) is not None, 30, "the first run's record")
    run = first_run(fleet)
    assert run is not None and run.exit_code == 3 and run.output.answer == "done"
    assert not run.log_tail
    assert fleet.workers[0].poll() is None


def test_an_input_given_where_an_agent_left_a_link_replaces_the_link(tmp_path: Path) -> None:
    """Every step gives its inputs through `StepFolder.give` (a goal step's TODO included): a link an agent
    of an earlier round left in `in/` under an input's name is replaced by the input, and the file it
    named is untouched (a plain copy to that name, as goal steps made, writes through the link)."""
    victim = tmp_path / "worker.txt"
    victim.write_text("the worker's own\n")
    folder = StepFolder.ready(tmp_path / "step")
    (folder.inputs / "todo.md").symlink_to(victim)
    given = StepFolder.ready(folder.root).give("todo.md", b"- [ ] t1: a task\n")
    assert not given.is_symlink()
    assert given.read_text() == "- [ ] t1: a task\n"
    assert victim.read_text() == "the worker's own\n"
