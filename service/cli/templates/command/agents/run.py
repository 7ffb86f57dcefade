"""The runner: your agent. It reads the task and the instructions, does the work, writes its output.

tunefleet runs it once per try as `python3 agents/run.py --input {input} --system {system} ...` (see
tuning.yaml). Replace the body with a call to your own agent; keep the contract (docs/adapters.md):
  - read the task from --input (JSON: case, rev, input) and the instructions from the --system folder;
  - work in --workspace, leave notes for later runs in --memory;
  - write --output (JSON: answer, turns, skills_loaded, usage); exit 75 if your sandbox is unusable.
This stand-in "follows" the instructions by saying every phrase they quote.
"""

import argparse
import json
import re
from pathlib import Path

parser = argparse.ArgumentParser()
for name in ("input", "system", "memory", "workspace", "output", "skills"):
    parser.add_argument(f"--{name}", required=True)
args = parser.parse_args()

task = json.loads(Path(args.input).read_text())
instructions = "\n".join(p.read_text() for p in sorted(Path(args.system).rglob("*.md")))
phrases = re.findall(r'"([^"]+)"', instructions)
answer = " ".join(f"{phrase[0].upper()}{phrase[1:]}." for phrase in phrases) or "I do not know."

(Path(args.memory) / "notes.md").write_text(f"Last answer to {task['case']}: {answer}\n")
output = {
    "answer": answer,
    "turns": 1,
    "skills_loaded": [s for s in args.skills.split(",") if s],
    "usage": {"input_tokens": len(instructions) // 4, "output_tokens": len(answer) // 4, "cost_usd": 0.0},
}
Path(args.output).write_text(json.dumps(output))
