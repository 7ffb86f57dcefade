"""A tunefleet runner around aider: `aider --message PROMPT`, in the run's workspace.

    aider_runner.py --input {input} --system {system} --memory {memory} --workspace {workspace}
                    --output {output} --expected-skills {expected_skills} [--cli-arg ARG]...

The instruction files and the task go in as one message; aider runs without git (`--no-git`),
without streaming or colours, and says yes to its own questions. `AIDER_BIN` names the binary
(default `aider` on PATH); without it the wrapper exits 127. `--cli-arg` passes more arguments on
(e.g. `--cli-arg=--model --cli-arg=sonnet`).

aider has no JSON output. After each call to the model it prints a usage report, made in
`Coder.calculate_and_show_tokens_and_cost` (aider/coders/base_coder.py):

    Tokens: 2.4k sent, 1.8k cache write, 12k cache hit, 156 received. Cost: $0.0091 message, $0.0091 session.

The cache parts appear only when there are some, the cost part only when aider knows the model's
price; counts are rounded by `format_tokens` (below 1000 exact, then `2.4k`, from 10000 on `12k`),
so these tokens are exact to two or three digits. The wrapper sums `sent` and `cache hit` (aider's
`sent` already holds the cache writes) as input and `received` as output over every report, and
takes the cost from the last report's `session` figure. A report line the model writes into its own
reply can only add tokens, never hide any: aider prints its real report after the reply. The answer
is the text between the last report and the one before it (or aider's banner).
"""

from __future__ import annotations

import re

from wrapper import Args, Result, full_prompt, run_wrapper

COUNT = r"(\d+(?:\.\d+)?k?)"
REPORT = re.compile(
    rf"^Tokens: {COUNT} sent(?:, {COUNT} cache write)?(?:, {COUNT} cache hit)?, {COUNT} received\."
    r"(?: Cost: \$(\d+(?:\.\d+)?) message, \$(\d+(?:\.\d+)?) session\.)?\s*$"
)
BANNER = re.compile(
    r"^(Aider v|Main model:|Weak model:|Editor model:|Model:|Git repo:|Repo-map:|Added |Use /help|"
    r"https://aider\.chat|Warning)"
)


def count(text: str | None) -> int:
    """A count as `format_tokens` printed it: `156`, `2.4k`, `12k`."""
    if not text:
        return 0
    if text.endswith("k"):
        return round(float(text[:-1]) * 1000)
    return int(text)


def parse(stdout: str) -> Result:
    result = Result()
    reply: list[str] = []
    for line in stdout.splitlines():
        match = REPORT.match(line.strip())
        if match is None:
            if not BANNER.match(line):
                reply.append(line)
            continue
        sent, _write, hit, received, _message_usd, session_usd = match.groups()
        result.input_tokens += count(sent) + count(hit)
        result.output_tokens += count(received)
        result.turns += 1
        result.measured = True
        if session_usd is not None:
            result.cost_usd = float(session_usd)
        result.answer = "\n".join(reply).strip()
        reply = []
    if not result.measured:
        result.answer = "\n".join(reply).strip()
    return result


FLAGS = ("--no-git", "--no-stream", "--no-pretty", "--yes-always", "--no-check-update")
"""No git, streaming or colours; yes to its own questions; no update check."""


def argv(cli: str, args: Args) -> list[str]:
    return [cli, *FLAGS, *args.cli_args, "--message", full_prompt(args)]


if __name__ == "__main__":
    run_wrapper(__doc__ or "", ("AIDER_BIN", "aider"), argv, lambda printout, _args: parse(printout))
