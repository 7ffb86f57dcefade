"""The command adapters against a real script agent: exit codes, timeouts, cancellation, sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.core.models.case import Case, RubricItem
from service.core.models.records import ApplyOutput, Feedback, RunRecord
from service.core.models.tuning import CommandAdapter, SandboxConfig
from tests.support.tools import needs_tool, python_agent_paths
from workers.adapters.base import AnalyzeRequest, ApplyRequest, RunRequest
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner, PlaceholderError
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import SandboxMounts, SandboxProber, wrap_argv

AGENT = str(Path(__file__).parent / "agents" / "contract_agent.py")
CASE = Case(id="c1", input="say hello", rubric=[RubricItem(id="r1", text="says hello")])
GRACE_S = 5.0
HOST = AgentHost(grace_s=GRACE_S)
needs_bwrap = needs_tool("bwrap")


def _agent(mode: str, *step: str, pid_file: str = "{home}/agent.pid") -> list[str]:
    return [sys.executable, AGENT, "--mode", mode, "--pid-file", pid_file, *step]


def _runner_argv(mode: str, pid_file: str = "{home}/agent.pid") -> list[str]:
    return _agent(
        mode, "run", "--input", "{input}", "--output", "{output}", "--memory", "{memory}", pid_file=pid_file
    )


def _where(tmp_path: Path, step: str) -> dict[str, Any]:
    attempt_dir = tmp_path / "attempt"
    step_dir = attempt_dir / f"{step}-1"
    return {
        "tuning": "t1",
        "case_id": CASE.id,
        "phase": "nomem",
        "attempt": 1,
        "attempt_dir": attempt_dir,
        "step_dir": step_dir,
        "log_file": step_dir / f"{step}.log",
        "demo": CASE.demo,
    }


def _run_request(tmp_path: Path) -> RunRequest:
    where = _where(tmp_path, "run")
    (tmp_path / "system").mkdir(exist_ok=True)
    return RunRequest(
        **where,
        task=CASE.task(),
        run_index=1,
        version="abc123",
        system_dir=tmp_path / "system",
        memory_dir=where["step_dir"] / "memory",
        workspace_dir=where["step_dir"] / "workspace",
    )


def _analyze_request(tmp_path: Path) -> AnalyzeRequest:
    run = RunRecord(version="abc123", work="run-1", started_at=datetime.now(UTC), duration_ms=5, exit_code=0)
    for folder in ("system", "memory", "workspace"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return AnalyzeRequest(
        **_where(tmp_path, "analyze"),
        case=CASE,
        run=run,
        system_dir=tmp_path / "system",
        memory_dir=tmp_path / "memory",
        workspace_dir=tmp_path / "workspace",
    )


def _pid_file(request: RunRequest | AnalyzeRequest) -> Path:
    return request.step_dir / "home" / "agent.pid"


def _pids(pid_file: Path) -> list[int]:
    return [int(line) for line in pid_file.read_text().split()]


def _is_gone(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper that is not us (it runs nothing any more)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_normal_run_writes_valid_output(tmp_path: Path) -> None:
    """A run exiting 0 with a valid output file yields that output; its stdout and stderr are logged."""
    request = _run_request(tmp_path)
    outcome = await CommandRunner(CommandAdapter(argv=_runner_argv("normal")), HOST).run(request)
    assert outcome.exit_code == 0 and outcome.void is None and outcome.sandbox_down is None
    assert outcome.output is not None and outcome.output.answer == "done: say hello"
    log_text = request.log_file.read_text()
    assert "working on case c1" in log_text and "a warning on stderr" in log_text
    assert (request.memory_dir / "memory.md").exists()


async def test_hung_runner_is_killed_at_timeout(tmp_path: Path) -> None:
    """A runner that hangs is killed at its timeout and its process is gone; the run is not void but
    a run to grade, which says it timed out and carries the end of its log."""
    request = _run_request(tmp_path)
    config = CommandAdapter(argv=_runner_argv("hang"), timeout_s=1.0)
    outcome = await CommandRunner(config, HOST).run(request)
    assert outcome.void is None and outcome.timed_out
    assert outcome.output is not None and outcome.output.error == "timed out after 1 s"
    assert outcome.log_tail is not None and "starting in mode hang" in outcome.log_tail
    [pid] = _pids(_pid_file(request))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_timeout_ends_the_whole_process_group(tmp_path: Path) -> None:
    """A timeout ends the agent's children too, not only the agent."""
    request = _run_request(tmp_path)
    config = CommandAdapter(argv=_runner_argv("fork"), timeout_s=1.0)
    outcome = await CommandRunner(config, HOST).run(request)
    assert outcome.timed_out
    pids = _pids(_pid_file(request))
    assert len(pids) == 2 and all(_is_gone(pid) for pid in pids)


async def test_sandbox_exit_code_is_sandbox_down(tmp_path: Path) -> None:
    """The configured sandbox exit code means the sandbox is down, quoting the runner's last log line."""
    outcome = await CommandRunner(CommandAdapter(argv=_runner_argv("sandbox")), HOST).run(
        _run_request(tmp_path)
    )
    assert outcome.sandbox_down == "runner exited 75: bwrap: cannot create the namespace"
    assert outcome.void is None and outcome.output is None


@pytest.mark.parametrize("mode", ["oom", "sigkill"])
async def test_memory_kill_is_void(tmp_path: Path, mode: str) -> None:
    """Exit 137 or death by SIGKILL makes the run void: killed for memory."""
    outcome = await CommandRunner(CommandAdapter(argv=_runner_argv(mode)), HOST).run(_run_request(tmp_path))
    assert outcome.exit_code in (137, -9)
    assert outcome.void == "killed for memory (exit 137)" and outcome.output is None
    assert outcome.log_tail is not None and f"starting in mode {mode}" in outcome.log_tail


async def test_a_runner_that_writes_no_output_is_void(tmp_path: Path) -> None:
    """A runner that exits without writing its output file says nothing about the prose: a void run,
    whose reason quotes the exit code and the last log line."""
    outcome = await CommandRunner(CommandAdapter(argv=_runner_argv("crash")), HOST).run(
        _run_request(tmp_path)
    )
    assert outcome.void == "runner exited 3 without writing output.json: agent: something broke"
    assert outcome.output is None and outcome.sandbox_down is None and not outcome.timed_out


async def test_a_runner_that_cannot_start_is_void(tmp_path: Path) -> None:
    """Without a sandbox, a runner whose program cannot be started (the keeper's exit 127) is a void
    run saying why, not a graded one."""
    missing = str(tmp_path / "no-such-agent")
    outcome = await CommandRunner(CommandAdapter(argv=[missing, "{input}"]), HOST).run(_run_request(tmp_path))
    assert outcome.exit_code == 127 and outcome.output is None and outcome.sandbox_down is None
    assert outcome.void is not None and outcome.void.startswith(f"runner could not start: {missing}: ")


async def test_an_invalid_output_file_is_still_a_run(tmp_path: Path) -> None:
    """A runner that writes a broken output file made a run, graded, whose output names the problem."""
    outcome = await CommandRunner(CommandAdapter(argv=_runner_argv("bad-json")), HOST).run(
        _run_request(tmp_path)
    )
    assert outcome.void is None and outcome.sandbox_down is None
    assert outcome.output is not None and "invalid RunOutput" in (outcome.output.error or "")


@pytest.mark.parametrize(("mode", "grace_s"), [("hang", 30.0), ("stubborn", 0.5)])
async def test_cancel_ends_the_agent_within_grace(tmp_path: Path, mode: str, grace_s: float) -> None:
    """Cancelling a run ends the agent (by TERM, or by KILL once the grace period is over) and re-raises."""
    request = _run_request(tmp_path)
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    runner = CommandRunner(CommandAdapter(argv=_runner_argv(mode, pid_file=str(fifo))), AgentHost(grace_s))
    task = asyncio.create_task(runner.run(request))
    [pid] = [int(line) for line in (await asyncio.to_thread(fifo.read_text)).split()]
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - cancelled_at < grace_s + 2.0
    assert not alive(pid)


def alive(pid: int) -> bool:
    """Whether the process runs: a zombie has ended (killed with its keeper, it is reaped by whoever
    inherited it, here the machine's init, which may take its time under load)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def test_unknown_placeholder_is_a_config_error() -> None:
    """An argv template naming a placeholder the step lacks is refused when the adapter is built."""
    with pytest.raises(PlaceholderError, match=r"argv\[2\].*unknown placeholder \{worktree\}"):
        CommandRunner(CommandAdapter(argv=["agent", "run", "{worktree}"]), HOST)


async def test_analyzer_writes_valid_feedback(tmp_path: Path) -> None:
    """An analyzer that exits 0 leaves feedback that validates, and a clean StepExit."""
    request = _analyze_request(tmp_path)
    argv = _agent(
        "normal", "analyze", "--run", "{run}", "--feedback", "{feedback}", "--analysis", "{analysis}"
    )
    graded = await CommandAnalyzer(CommandAdapter(argv=argv), HOST).analyze(request)
    step = graded.exit
    assert step.exit_code == 0 and step.error is None and not step.timed_out
    assert graded.feedback is not None and Feedback.model_validate_json(graded.feedback).verdict == "pass"
    assert graded.source == str(request.step_dir / "out" / "feedback.json")
    brief = json.loads((request.step_dir / "in" / "brief.json").read_text())
    assert brief["run"]["work"] == "run-1"  # its process had a brief


async def test_analyzer_invalid_feedback_is_left_for_the_caller(tmp_path: Path) -> None:
    """Invalid feedback still exits 0; the file is there and its validation names the bad field."""
    request = _analyze_request(tmp_path)
    argv = _agent(
        "bad-json", "analyze", "--run", "{run}", "--feedback", "{feedback}", "--analysis", "{analysis}"
    )
    graded = await CommandAnalyzer(CommandAdapter(argv=argv), HOST).analyze(request)
    assert graded.exit.exit_code == 0 and graded.exit.error is None and graded.feedback is not None
    with pytest.raises(ValidationError) as caught:
        Feedback.model_validate_json(graded.feedback)
    assert ("verdict",) in [error["loc"] for error in caught.value.errors()]


async def test_hung_analyzer_times_out(tmp_path: Path) -> None:
    """An analyzer that hangs is ended at its timeout and says so in its StepExit."""
    request = _analyze_request(tmp_path)
    argv = _agent("hang", "analyze", "--run", "{run}", "--feedback", "{feedback}", "--analysis", "{analysis}")
    step = (await CommandAnalyzer(CommandAdapter(argv=argv, timeout_s=1.0), HOST).analyze(request)).exit
    assert step.timed_out and step.error == "timed out after 1 s"
    assert _is_gone(_pids(_pid_file(request))[0])


async def test_applier_edits_worktree(tmp_path: Path) -> None:
    """An applier edits its worktree and writes a valid ApplyOutput."""
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    request = ApplyRequest(
        **_where(tmp_path, "apply"),
        case=CASE,
        feedback=Feedback(verdict="fail", done=False),
        worktree_dir=worktree,
    )
    argv = _agent("normal", "apply", "--worktree", "{worktree}", "--output", "{output}")
    applied = await CommandApplier(CommandAdapter(argv=argv), HOST).apply(request)
    assert applied.exit.exit_code == 0 and applied.output is not None
    assert ApplyOutput.model_validate_json(applied.output).summary == "added a rule"
    assert (worktree / "rules.md").read_text() == "- rule: be-brief\n"


@needs_bwrap
async def test_bubblewrap_run_sees_only_its_writable_dirs(tmp_path: Path) -> None:
    """Under bubblewrap the agent runs and writes its output, while the system snapshot stays read-only."""
    request = _run_request(tmp_path)
    sandbox = SandboxConfig(kind="bubblewrap", readonly_paths=python_agent_paths())
    config = CommandAdapter(argv=_runner_argv("normal"), sandbox=sandbox)
    outcome = await CommandRunner(config, HOST).run(request)
    assert outcome.output is not None and outcome.output.error is None
    probe = CommandAdapter(argv=["touch", "{system}/x"], sandbox=SandboxConfig(kind="bubblewrap"))
    denied = await CommandRunner(probe, HOST).run(request)
    assert denied.exit_code != 0 and not (request.system_dir / "x").exists()


def test_container_wrap_mounts_paths_and_passes_env_by_name() -> None:
    """A container mounts inputs read-only, writable dirs read-write, and passes env by name only."""
    mounts = SandboxMounts(
        writable=[Path("/s/ws")], readonly=[Path("/s/sys")], cwd=Path("/s/ws"), env_names=["KEY"]
    )
    argv = wrap_argv(["agent", "go"], SandboxConfig(kind="docker", image="img:1"), mounts)
    assert argv[:4] == ["docker", "run", "--rm", "-i"] and argv[-3:] == ["img:1", "agent", "go"]
    assert (
        "/s/sys:/s/sys:ro" in argv
        and "/s/ws:/s/ws" in argv
        and "KEY" in argv
        and "KEY=" not in " ".join(argv)
    )


async def test_prober_reports_why_the_sandbox_is_down() -> None:
    """The prober says nothing without a sandbox, and a reason when the probe command fails."""
    assert await SandboxProber(SandboxConfig(kind="none")).probe() is None
    failing = SandboxConfig(kind="bubblewrap", probe_argv=[sys.executable, "-c", "raise SystemExit('no ns')"])
    assert await SandboxProber(failing).probe() == "sandbox probe exited 1: no ns"
    if shutil.which("bwrap"):
        assert await SandboxProber(SandboxConfig(kind="bubblewrap")).probe() is None
