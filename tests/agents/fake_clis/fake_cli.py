#!/usr/bin/env python3
"""A stand-in for an agent CLI (claude, codex, aider) in the tests: it prints a recorded envelope.

    FAKE_CLI_ENVELOPE=<fixture>  the file whose content it prints on standard output, as is
    FAKE_CLI_RECORD=<file>       where it writes its argv and working directory (JSON), if set
    FAKE_CLI_EXIT=<n>            its exit code (default 0)

The fixtures beside it are envelopes in each CLI's documented format: `claude-result.json`
(`claude -p --output-format json`), `codex-exec.jsonl` (`codex exec --json`) and `aider-output.txt`
(aider's reply and its "Tokens: … Cost: …" reports).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    record = os.environ.get("FAKE_CLI_RECORD")
    if record:
        Path(record).write_text(json.dumps({"argv": sys.argv, "cwd": os.getcwd()}), encoding="utf-8")
    sys.stdout.write(Path(os.environ["FAKE_CLI_ENVELOPE"]).read_text(encoding="utf-8"))
    sys.exit(int(os.environ.get("FAKE_CLI_EXIT", "0")))


if __name__ == "__main__":
    main()
