"""The agent CLI wrappers of examples/agents/: each runs as a real subprocess around a fake CLI that
prints a recorded envelope in that CLI's documented format, and the usage the fleet records is the
CLI's own report (source `envelope`); the tokens nobody measured show in `tunefleet status`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from service.cli.render import status_table
from service.client.tunings import load_tuning_file
from service.core.io.files import read_model
from service.core.models.records import CaseResult, RunOutput, RunRecord, Usage
from service.core.models.status import FleetStatus, TuningStatus
from service.core.models.tuning import TuningConfig
from tests.support.fleet import Fleet, write_tuning
from tests.test_command_loop import R1_CASE, agent, case_root
from workers.adapters.isolation import agent_environment

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "agents"
FAKES = Path(__file__).resolve().parent / "agents" / "fake_clis"
FAKE_CLI = FAKES / "fake_cli.py"
BIN_ENV = {"claude": "CLAUDE_BIN", "codex": "CODEX_BIN", "aider": "AIDER_BIN"}
ENVELOPE = {"claude": "claude-result.json", "codex": "codex-exec.jsonl", "aider": "aider-output.txt"}
ANSWER = "Line INV-1001-2 is the duplicate charge; refund it."
TASK = "A customer asks about a double charge on invoice INV-1001."


def runner_args(paths: dict[str, Path] | None = None) -> list[str]:
    """The runner's placeholders as the wrappers take them: real paths, or the argv template."""
    names = ["input", "system", "memory", "workspace", "output"]
    args = []
    for name in names:
        args += [f"--{name}", str(paths[name]) if paths else f"{{{name}}}"]
    return [*args, "--expected-skills", "greet" if paths else "{expected_skills}"]


def step_paths(tmp_path: Path) -> dict[str, Path]:
    """A run's folder as the fleet lays it out: the task, a system with a skill, memory, workspace."""
    paths = {name: tmp_path / name for name in ("system", "memory", "workspace", "out")}
    for folder in paths.values():
        folder.mkdir()
    (paths["system"] / "skills").mkdir()
    (paths["system"] / "rules.md").write_text("# Rules\n\n- rule: cite the invoice line\n")
    (paths["system"] / "skills" / "greet.md").write_text("# Greet\n\nSay hello first.\n")
    paths["input"] = tmp_path / "input.json"
    paths["input"].write_text(json.dumps({"case": "billing-01", "rev": 1, "input": TASK}))
    paths["output"] = paths["out"] / "output.json"
    return paths


def run_wrapper(
    cli: str, paths: dict[str, Path], *extra: str, cli_bin: str = str(FAKE_CLI)
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        BIN_ENV[cli]: cli_bin,
        "FAKE_CLI_ENVELOPE": str(FAKES / ENVELOPE[cli]),
        "FAKE_CLI_RECORD": str(paths["out"].parent / "cli-call.json"),
    }
    argv = [sys.executable, str(EXAMPLES / f"{cli}_runner.py"), *runner_args(paths), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)


def cli_call(paths: dict[str, Path]) -> dict[str, Any]:
    """The argv and working directory the fake CLI was started with."""
    call: dict[str, Any] = json.loads((paths["out"].parent / "cli-call.json").read_text())
    return call


def test_claude_wrapper_records_the_answer_and_the_usage_of_claudes_result_object(tmp_path: Path) -> None:
    """The Claude Code wrapper runs `claude -p --output-format json` in the workspace with the instructions
    as system prompt, and writes the result's answer, turns, every input token and total_cost_usd."""
    paths = step_paths(tmp_path)
    proc = run_wrapper("claude", paths)
    assert proc.returncode == 0, proc.stderr
    output = RunOutput.model_validate_json(paths["output"].read_text())
    assert output.answer == "Line INV-1001-2 is the duplicate charge; I refunded it and told the customer."
    assert output.turns == 4 and output.error is None and output.skills_loaded == ["greet"]
    assert output.usage == Usage(
        input_tokens=12 + 5830 + 41220, output_tokens=612, cost_usd=0.0561825, source="envelope"
    )
    call = cli_call(paths)
    assert call["cwd"] == str(paths["workspace"])
    argv = call["argv"][1:]
    assert argv[:3] == ["-p", "--output-format", "json"]
    assert "- rule: cite the invoice line" in argv[argv.index("--append-system-prompt") + 1]
    assert TASK in argv[-1] and "greet" in argv[-1] and str(paths["memory"]) in argv[-1]


def test_codex_wrapper_sums_turn_completed_usage_and_prices_it(tmp_path: Path) -> None:
    """The Codex wrapper runs `codex exec --json` in the workspace, answers with the last agent message
    and takes the tokens of `turn.completed`, priced from its per-million prices."""
    paths = step_paths(tmp_path)
    proc = run_wrapper("codex", paths, "--usd-per-1m-input", "1.25", "--usd-per-1m-output", "10")
    assert proc.returncode == 0, proc.stderr
    output = RunOutput.model_validate_json(paths["output"].read_text())
    assert output.answer == ANSWER and output.turns == 3 and output.error is None
    assert output.usage == Usage(
        input_tokens=24763,
        output_tokens=122,
        cost_usd=round((24763 * 1.25 + 122 * 10) / 1e6, 6),
        source="envelope",
    )
    call = cli_call(paths)
    assert call["cwd"] == str(paths["workspace"]) and call["argv"][1:3] == ["exec", "--json"]
    assert "- rule: cite the invoice line" in call["argv"][-1] and TASK in call["argv"][-1]


def test_aider_wrapper_sums_every_tokens_report_and_takes_the_session_cost(tmp_path: Path) -> None:
    """The aider wrapper sums `sent` and `cache hit` as input and `received` as output over every
    "Tokens: …" report, takes the last `session` cost, and answers with the last reply."""
    paths = step_paths(tmp_path)
    proc = run_wrapper("aider", paths)
    assert proc.returncode == 0, proc.stderr
    output = RunOutput.model_validate_json(paths["output"].read_text())
    assert output.answer == ANSWER and output.turns == 2 and output.error is None
    assert output.usage == Usage(
        input_tokens=2400 + 12000 + 3100, output_tokens=156 + 94, cost_usd=0.02, source="envelope"
    )
    call = cli_call(paths)
    assert call["cwd"] == str(paths["workspace"])
    assert "--message" in call["argv"] and TASK in call["argv"][-1]


@pytest.mark.parametrize("cli", sorted(BIN_ENV))
def test_a_wrapper_whose_cli_is_missing_exits_127_without_output(tmp_path: Path, cli: str) -> None:
    """A wrapper that cannot find its CLI exits 127 (a void run), naming the CLI and its variable."""
    paths = step_paths(tmp_path)
    proc = run_wrapper(cli, paths, cli_bin=str(tmp_path / "no-such-cli"))
    assert proc.returncode == 127
    assert "no-such-cli" in proc.stderr and BIN_ENV[cli] in proc.stderr
    assert not paths["output"].exists()


def test_a_cli_without_a_usage_report_is_not_recorded_as_measured(tmp_path: Path) -> None:
    """When the CLI prints no usage report the wrapper says so in `error` and claims no measurement."""
    paths = step_paths(tmp_path)
    (tmp_path / "empty.txt").write_text("something went wrong\n")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "claude_runner.py"), *runner_args(paths)],
        env={**os.environ, "CLAUDE_BIN": str(FAKE_CLI), "FAKE_CLI_ENVELOPE": str(tmp_path / "empty.txt")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    output = RunOutput.model_validate_json(paths["output"].read_text())
    assert output.error == "claude printed no result object" and output.usage.source == "agent"


def test_a_sum_of_usages_keeps_the_tokens_only_agents_counted() -> None:
    """Summing usages keeps the unmeasured (source `agent`) tokens apart, and an output that names a
    measured source cannot also claim unmeasured tokens."""
    agent_said = Usage(input_tokens=70, output_tokens=30)
    measured = Usage(input_tokens=1000, output_tokens=10, source="envelope", unmeasured_tokens=999)
    assert agent_said.source == "agent" and agent_said.unmeasured_tokens == 100
    assert measured.unmeasured_tokens == 0
    total = Usage() + measured + agent_said + agent_said
    assert total.source is None and total.tokens == 1210 and total.unmeasured_tokens == 200
    assert Usage.model_validate(total.model_dump()) == total
    assert (Usage() + measured).source == "envelope"


def test_status_shows_the_tokens_nobody_measured() -> None:
    """`tunefleet status` prints, per tuning whose tokens were not all measured, how many were measured,
    estimated by the fleet and counted by nobody but the agents."""
    status = FleetStatus(
        queue_depth=0,
        in_progress=0,
        breaker={},
        paused=False,
        workers=[],
        tunings=[
            TuningStatus(name="agents", tokens=1000, unmeasured_tokens=200),
            TuningStatus(name="measured", tokens=500),
            TuningStatus(name="llm", tokens=400, estimated_tokens=100),
        ],
    )
    console = Console(record=True, width=200)
    console.print(status_table(status))
    text = console.export_text()
    assert "tokens agents: of 1,000: 800 measured, 200 (20%) counted by no one but the agents" in text
    assert "tokens llm: of 400: 300 measured, 100 estimated (25%)" in text
    assert "tokens measured" not in text


def test_the_example_configs_are_valid_runners() -> None:
    """The example tuning file loads, and each YAML snippet is a runner whose placeholders tunefleet knows."""
    tuning = load_tuning_file(EXAMPLES / "tuning.yaml")
    assert tuning.runner.kind == "command" and "claude_runner.py" in tuning.runner.argv
    for cli in BIN_ENV:
        runner = yaml.safe_load((EXAMPLES / f"{cli}.yaml").read_text())["runner"]
        config = TuningConfig.model_validate({"name": "t", "system": ".", "cases": ".", "runner": runner})
        assert config.runner.kind == "command" and config.runner.argv[1] == f"{cli}_runner.py"
        assert BIN_ENV[cli] in config.runner.env


async def test_claude_wrapper_as_a_fleets_runner_records_envelope_usage(fleet: Fleet, tmp_path: Path) -> None:
    """A tuning whose runner is the Claude wrapper records the envelope's usage with source `envelope`;
    the analyzer's own word is counted as unmeasured, in the case's result and in the fleet's status."""
    runner = {
        "kind": "command",
        "argv": [sys.executable, str(EXAMPLES / "claude_runner.py"), *runner_args()],
        "timeout_s": 20,
        "env": {"CLAUDE_BIN": str(FAKE_CLI), "FAKE_CLI_ENVELOPE": str(FAKES / ENVELOPE["claude"])},
    }
    tuning = write_tuning(
        tmp_path / "t",
        [R1_CASE],
        name="t1",
        runner=runner,
        analyzer=agent("normal", "analyze"),
        applier=agent("normal", "apply"),
    )
    await fleet.start_tuning(tuning)
    fleet.start_worker()
    rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "completed"
    run = read_model(case_root(fleet) / "nomem" / "1" / "run.json", RunRecord)
    envelope = Usage(input_tokens=47062, output_tokens=612, cost_usd=0.0561825, source="envelope")
    assert run is not None and run.output.usage == envelope
    result = read_model(case_root(fleet) / "result.json", CaseResult)
    assert result is not None and result.steps == 4  # two runs (envelope), two analyses (the agent's word)
    assert result.usage.source is None and result.usage.unmeasured_tokens == 2 * 100
    assert result.usage.tokens == 2 * envelope.tokens + 2 * 100

    async with fleet.client() as client:
        deadline = time.monotonic() + 10
        while (tuning_status := (await client.status()).tunings[0]).completed < 1:
            assert time.monotonic() < deadline, "the status never counted the case completed"
            await asyncio.sleep(0.05)
    assert tuning_status.unmeasured_tokens == 200
    assert tuning_status.tokens == 2 * envelope.tokens + 200


def test_the_example_tuning_never_hands_the_meta_agents_key_to_its_runner() -> None:
    """In examples/agents/tuning.yaml the runner (Claude Code) gets its own key and binary, sandboxed, and
    never OPENAI_API_KEY, which the worker holds for its LLM analyzer and applier: built from a worker
    environment holding both keys and a Redis password, the runner's environment has only its own."""
    tuning = load_tuning_file(EXAMPLES / "tuning.yaml")
    assert tuning.runner.kind == "command" and tuning.runner.sandbox.kind == "bubblewrap"
    assert tuning.analyzer.kind == "llm" and tuning.analyzer.api_key_env == "OPENAI_API_KEY"
    worker = {"PATH": "/usr/bin", "OPENAI_API_KEY": "sk-meta", "ANTHROPIC_API_KEY": "sk-run", "HOME": "/root"}
    env = agent_environment(
        tuning.runner.env, Path("/step/home"), {**worker, "TUNEFLEET_REDIS_PASSWORD": "x"}
    )
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/step/home",
        "CLAUDE_BIN": "claude",
        "ANTHROPIC_API_KEY": "sk-run",
    }
