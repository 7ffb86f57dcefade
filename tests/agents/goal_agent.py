"""A goal agent CLI for the tests: plans, works and reviews through the goal placeholders, as a real
agent would, and hangs in the step named by $GOAL_AGENT_HANG (writing its pid to `out/pid` first); with
$GOAL_AGENT_HOSTILE its work step links its result to /etc/passwd (`symlink`) or leaves a git repository
in the workspace (`nested-git`).

    goal_agent.py STEP BRIEF OUTPUT WORKSPACE [SYSTEM]

The work step also lists the files of SYSTEM (the tuning's version, read-only) in `system-files.txt`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    step, brief_file, output, workspace = sys.argv[1:5]
    out = Path(output).parent
    (out / "pid").write_text(str(os.getpid()))
    if os.environ.get("TUNEFLEET_STEP") != step:
        print(f"wrong step: {os.environ.get('TUNEFLEET_STEP')} != {step}", file=sys.stderr)
        return 3
    if os.environ.get("GOAL_AGENT_HANG") == step:
        while True:
            time.sleep(1)
    brief = json.loads(Path(brief_file).read_text())
    if step == "plan":
        Path(output).write_text(f"# {brief['goal']}\n\n- [ ] A: write the answer\n")
    elif step == "work" and os.environ.get("GOAL_AGENT_HOSTILE") == "symlink":
        os.symlink("/etc/passwd", output)  # the fleet must not read what it points at
    elif step == "work" and os.environ.get("GOAL_AGENT_HOSTILE") == "nested-git":
        subprocess.run(["git", "init", "--quiet", str(Path(workspace, "vendored"))], check=True)
        Path(workspace, "vendored", "x.txt").write_text("x\n")
        Path(output).write_text(json.dumps({"status": "completed", "summary": "vendored a repository"}))
    elif step == "work":
        Path(workspace, "answer.txt").write_text("42\n")
        if len(sys.argv) > 5:
            names = sorted(p.name for p in Path(sys.argv[5]).iterdir())
            Path(workspace, "system-files.txt").write_text("\n".join(names) + "\n")
        progress = out / "progress.jsonl"
        progress.write_text(
            json.dumps({"task": "A", "event": "started"})
            + "\n"
            + json.dumps({"task": "A", "event": "finished"})
            + "\n"
        )
        Path(output).write_text(json.dumps({"status": "completed", "summary": "wrote answer.txt"}))
    else:
        done = Path(workspace, "answer.txt").exists()
        review = {
            "decision": "accept" if done else "reject",
            "complete": done,
            "summary": "answer.txt is there" if done else "no answer",
            "rationale": "checked the workspace",
            "remaining_work": [] if done else ["write answer.txt"],
        }
        Path(output).write_text(json.dumps(review))
    return 0


if __name__ == "__main__":
    sys.exit(main())
