"""The applier: edits the instructions as the analyzer's feedback asks.

tunefleet runs it under a fleet-wide lock as `python3 agents/edit.py --feedback {feedback} --worktree
{worktree} --output {output}`: --worktree is a private copy of the instructions; what you leave there
becomes the next version. Write --output as JSON (docs/adapters.md, "What the applier writes"):
summary, and `structural` (a reason) instead of editing when a change is not yours to make.
This stand-in adds each prose improvement's first line as a rule.
"""

import argparse
import json
from pathlib import Path

parser = argparse.ArgumentParser()
for name in ("feedback", "worktree", "output"):
    parser.add_argument(f"--{name}", required=True)
args = parser.parse_args()

feedback = json.loads(Path(args.feedback).read_text())
rules = Path(args.worktree) / "instructions.md"
text = rules.read_text()
added = []
for improvement in feedback.get("improvements", []):
    lead = improvement["change"].splitlines()[0].strip()
    if improvement["target"] == "prose" and lead and lead not in text:
        text += f"- {lead}\n"
        added.append(lead)
rules.write_text(text)
Path(args.output).write_text(json.dumps({"summary": "; ".join(added) or "nothing to add"}))
