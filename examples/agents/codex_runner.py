"""A tunefleet runner around OpenAI Codex: `codex exec --json`, in the run's workspace.

    codex_runner.py --input {input} --system {system} --memory {memory} --workspace {workspace}
                    --output {output} --expected-skills {expected_skills}
                    [--usd-per-1m-input USD --usd-per-1m-output USD] [--cli-arg ARG]...

`codex exec` takes no system prompt, so the instruction files and the task go in as one prompt.
The workspace is not a git repository, hence `--skip-git-repo-check`. `CODEX_BIN` names the binary
(default `codex` on PATH); without it the wrapper exits 127. `--cli-arg` passes more arguments on
(e.g. `--cli-arg=--model --cli-arg=gpt-5-codex`).

The usage is read from the JSON Lines events `codex exec --json` prints on standard output
(documented in codex's docs/exec.md, "JSON output mode"):

    {"type": "thread.started", "thread_id": "…"}
    {"type": "turn.started"}
    {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "<answer>"}}
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448,
                                         "output_tokens": 122}}
    {"type": "turn.failed", "error": {"message": "…"}}    {"type": "error", "message": "…"}

The answer is the last `agent_message`; the tokens are summed over `turn.completed` events
(`cached_input_tokens` is a part of `input_tokens`); `turns` counts the completed items (messages,
commands, tool calls). Codex reports no cost: `cost_usd` is priced here from `--usd-per-1m-input`
and `--usd-per-1m-output` (cached input at the input price), 0 without them.
"""

from __future__ import annotations

import json
from typing import Any

from wrapper import Args, Result, full_prompt, price, run_wrapper


def events(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects among the output's lines; other lines are skipped."""
    found = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def parse(stdout: str, args: Args) -> Result:
    result = Result()
    for event in events(stdout):
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "item.completed":
            result.turns += 1
            if item.get("type") == "agent_message":
                result.answer = str(item.get("text") or "")
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
            result.input_tokens += int(usage.get("input_tokens") or 0)
            result.output_tokens += int(usage.get("output_tokens") or 0)
            result.measured = True
        elif kind == "turn.failed":
            result.error = "codex: " + str((event.get("error") or {}).get("message", "the turn failed"))
        elif kind == "error" and result.error is None:
            result.error = "codex: " + str(event.get("message", "error"))
    result.cost_usd = price(args, result.input_tokens, result.output_tokens)
    return result


FLAGS = ("exec", "--json", "--skip-git-repo-check")
"""One non-interactive run printing JSON lines, in a folder that need not be a git repository."""


def argv(cli: str, args: Args) -> list[str]:
    return [cli, *FLAGS, "--cd", str(args.workspace), *args.cli_args, "--", full_prompt(args)]


if __name__ == "__main__":
    run_wrapper(__doc__ or "", ("CODEX_BIN", "codex"), argv, parse)
