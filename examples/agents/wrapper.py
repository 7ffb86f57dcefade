"""What the agent CLI wrappers share: the runner's placeholders, the prompt, running the CLI, the output.

Each wrapper (`claude_runner.py`, `codex_runner.py`, `aider_runner.py`) is a tunefleet runner: it
takes the runner's placeholders, builds one prompt from the task and the system's instruction
files, runs its CLI in the workspace (an argv list, never a shell string), reads the tokens and the
cost from the CLI's own usage report, and writes the run output JSON with `usage.source` set to
`envelope`. Standard library only, so that it runs with any Python 3.11 the worker has.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_CHARS = 200_000
"""An instruction file longer than this is cut, with a note saying so."""

KILLED_FOR_MEMORY = 137
CLI_NOT_FOUND = 127


@dataclass
class Args:
    """The runner's placeholders, and the extra arguments passed on to the CLI."""

    input: Path
    system: Path
    memory: Path
    workspace: Path
    output: Path
    expected_skills: list[str]
    cli_args: list[str]
    usd_per_1m_input: float
    usd_per_1m_output: float


@dataclass
class Result:
    """What a wrapper read from its CLI's report."""

    answer: str = ""
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    measured: bool = False
    """The CLI's usage report was found: the tokens are its count, not zeros for want of one."""


def _names(text: str) -> list[str]:
    """Comma-separated names, blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_args(description: str) -> Args:
    parser = argparse.ArgumentParser(description=description)
    for name in ("input", "system", "memory", "workspace", "output"):
        parser.add_argument(f"--{name}", required=True, type=Path)
    parser.add_argument("--expected-skills", type=_names, default=[], help="Comma-separated skill names.")
    parser.add_argument(
        "--cli-arg", dest="cli_args", action="append", default=[], help="An extra argument for the CLI."
    )
    parser.add_argument("--usd-per-1m-input", type=float, default=0.0, help="Price, when the CLI has none.")
    parser.add_argument("--usd-per-1m-output", type=float, default=0.0, help="Price, when the CLI has none.")
    return Args(**vars(parser.parse_args()))


def find_cli(env_name: str, default: str) -> str:
    """The CLI's path (`$env_name`, else `default` on PATH); exit 127 with a clear message if absent."""
    wanted = os.environ.get(env_name) or default
    found = shutil.which(wanted)
    if found is None:
        print(f"{Path(sys.argv[0]).name}: cannot find the CLI {wanted!r} (set {env_name})", file=sys.stderr)
        sys.exit(CLI_NOT_FOUND)
    return found


def instruction_files(system: Path) -> list[Path]:
    """The system's text files, in path order, hidden ones left out."""
    return sorted(
        p
        for p in system.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(system).parts)
    )


def skills_in(system: Path) -> list[str]:
    """The skills (`skills/<name>.md`) the system holds: all of them go into the prompt."""
    return sorted(p.stem for p in (system / "skills").glob("*.md")) if (system / "skills").is_dir() else []


def instructions(args: Args) -> str:
    """The system's instruction files, each under a header naming it."""
    parts = []
    for path in instruction_files(args.system):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[cut at {MAX_FILE_CHARS} characters]\n"
        parts.append(f"=== {path.relative_to(args.system)} ===\n{text.rstrip()}\n")
    return "\n".join(parts)


def task_prompt(args: Args) -> str:
    """The task, where the memory is, and the skills to load."""
    task = json.loads(args.input.read_text(encoding="utf-8"))
    lines = [
        f"Task (case {task['case']}):",
        str(task["input"]),
        "",
        f"Your memory folder is {args.memory}: read what is there first, and write there what a later "
        "run of the same task should know.",
    ]
    if args.expected_skills:
        lines.append("Load and follow these skills: " + ", ".join(args.expected_skills) + ".")
    lines.append("End with your final answer to the task.")
    return "\n".join(lines)


def full_prompt(args: Args) -> str:
    """Instructions and task in one prompt, for CLIs that take no system prompt."""
    return f"Follow these instructions.\n\n{instructions(args)}\n{task_prompt(args)}"


def run_cli(argv: list[str], args: Args) -> subprocess.CompletedProcess[str]:
    """Run the CLI in the workspace; its standard error goes to the runner's log as it comes."""
    proc = subprocess.run(
        argv, cwd=args.workspace, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, check=False
    )
    sys.stdout.write(proc.stdout[-20_000:])
    sys.stdout.flush()
    if proc.returncode in (KILLED_FOR_MEMORY, -9):
        print(f"{argv[0]} was killed (exit {proc.returncode})", file=sys.stderr)
        sys.exit(KILLED_FOR_MEMORY)
    return proc


def price(args: Args, input_tokens: int, output_tokens: int) -> float:
    return round((input_tokens * args.usd_per_1m_input + output_tokens * args.usd_per_1m_output) / 1e6, 6)


def write_output(args: Args, result: Result, returncode: int) -> None:
    """The run output (`tunefleet schema run-output`), usage source `envelope` when the CLI reported its
    usage (`agent`, with an error, when it did not: nobody counted); then exit as the CLI did."""
    error = result.error
    if error is None and not result.measured:
        error = "the CLI printed no usage report"
    if error is None and returncode != 0:
        error = f"the CLI exited {returncode}"
    output = {
        "answer": result.answer,
        "turns": result.turns,
        "skills_loaded": skills_in(args.system),
        "error": error,
        "usage": {
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost_usd": result.cost_usd,
            "source": "envelope" if result.measured else "agent",
        },
    }
    args.output.write_text(json.dumps(output, indent=2), encoding="utf-8")
    sys.exit(returncode)


def run_wrapper(
    doc: str,
    cli: tuple[str, str],
    argv: Callable[[str, Args], list[str]],
    parse: Callable[[str, Args], Result],
) -> None:
    """A wrapper's whole run: its placeholders read, its CLI (`cli`: the variable naming it and the default
    binary) found and run in the workspace with `argv`, the CLI's printout read by `parse`, the output
    written; it exits as the CLI did."""
    args = parse_args(doc)
    proc = run_cli(argv(find_cli(*cli), args), args)
    write_output(args, parse(proc.stdout, args), proc.returncode)
