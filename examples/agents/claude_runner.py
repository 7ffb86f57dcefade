"""A tunefleet runner around Claude Code: `claude -p --output-format json`, in the run's workspace.

    claude_runner.py --input {input} --system {system} --memory {memory} --workspace {workspace}
                     --output {output} --expected-skills {expected_skills} [--cli-arg ARG]...

The system's instruction files go in as the appended system prompt (`--append-system-prompt`), the
task as the prompt; `--add-dir` lets Claude Code reach the memory folder. `CLAUDE_BIN` names the
binary (default `claude` on PATH); without it the wrapper exits 127. `--cli-arg` passes more
arguments on (e.g. `--cli-arg=--model --cli-arg=sonnet`, `--cli-arg=--permission-mode
--cli-arg=acceptEdits`).

The usage is read from the result object Claude Code prints with `--output-format json`
(documented as "structured JSON with result, session ID, and metadata"; the last line of
`stream-json` is the same object):

    {"type": "result", "subtype": "success", "is_error": false, "num_turns": 4, "result": "<answer>",
     "session_id": "…", "total_cost_usd": 0.0561825,
     "usage": {"input_tokens": 12, "cache_creation_input_tokens": 5830,
               "cache_read_input_tokens": 41220, "output_tokens": 612, …}}

`input_tokens` in the run output is every input token the model read: `input_tokens` plus the cache
writes and cache reads; `cost_usd` is `total_cost_usd` (older versions: `cost_usd`).
"""

from __future__ import annotations

import json
from typing import Any

from wrapper import Args, Result, run_wrapper, task_prompt
from wrapper import instructions as system_prompt


def result_object(stdout: str) -> dict[str, Any] | None:
    """The `type: result` object: the whole output, or its last line that is one (stream-json)."""
    candidates = [stdout, *reversed(stdout.splitlines())]
    for text in candidates:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("type") == "result":
            return value
    return None


def parse(stdout: str) -> Result:
    envelope = result_object(stdout)
    if envelope is None:
        return Result(error="claude printed no result object")
    usage = envelope.get("usage") or {}
    input_tokens = sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    error = None
    if envelope.get("is_error") or envelope.get("subtype", "success") != "success":
        error = f"claude: {envelope.get('subtype', 'error')}: {str(envelope.get('result', ''))[:300]}"
    return Result(
        answer=str(envelope.get("result") or ""),
        turns=int(envelope.get("num_turns") or 0),
        input_tokens=input_tokens,
        output_tokens=int(usage.get("output_tokens") or 0),
        cost_usd=float(envelope.get("total_cost_usd", envelope.get("cost_usd")) or 0.0),
        error=error,
        measured="usage" in envelope,
    )


FLAGS = ("-p", "--output-format", "json")
"""One non-interactive run printing one JSON envelope."""


def argv(cli: str, args: Args) -> list[str]:
    memory_and_system = ["--add-dir", str(args.memory), "--append-system-prompt", system_prompt(args)]
    return [cli, *FLAGS, *memory_and_system, *args.cli_args, "--", task_prompt(args)]


if __name__ == "__main__":
    run_wrapper(__doc__ or "", ("CLAUDE_BIN", "claude"), argv, lambda printout, _args: parse(printout))
