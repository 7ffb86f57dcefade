"""The analyzer: grades one run against the case's rubric and says what to change.

tunefleet runs it after each run as `python3 agents/grade.py --case {case} --run {run} --feedback
{feedback}`. Replace the body with your grader (often a model asked to grade); keep the contract
(docs/adapters.md, "What the analyzer writes"): write --feedback as JSON with verdict (pass, fail or
void), done, a score per rubric id, and improvements, each {"target": "prose" or "dataset", "change":
"<one line>\n<details>"}. This stand-in passes a rubric item when the answer holds every phrase it quotes.
"""

import argparse
import json
import re
from pathlib import Path

parser = argparse.ArgumentParser()
for name in ("case", "run", "feedback"):
    parser.add_argument(f"--{name}", required=True)
args = parser.parse_args()

case = json.loads(Path(args.case).read_text())
run = json.loads(Path(args.run).read_text())
answer = ((run.get("output") or {}).get("answer") or "").lower()

scores, improvements = {}, []
for item in case["rubric"]:
    missing = [p for p in re.findall(r'"([^"]+)"', item["text"]) if p.lower() not in answer]
    scores[item["id"]] = 0.0 if missing else 1.0
    improvements += [{"target": "prose", "change": f'Say "{phrase}" to the customer.'} for phrase in missing]

passed = not improvements
feedback = {
    "verdict": "pass" if passed else "fail",
    "done": passed,
    "rubric": scores,
    "improvements": improvements,
    "summary": "every rubric item met" if passed else f"{len(improvements)} phrase(s) missing",
}
Path(args.feedback).write_text(json.dumps(feedback))
