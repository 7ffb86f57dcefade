"""What a case has spent, and the budget that bounds it.

A case's spend is the usage of its recorded steps plus its ledger, `spent.jsonl`: usage that no
record keeps (an analyzer round whose feedback was refused, an apply abandoned after its lock was
lost, a step cut short). A case at or past its budget ends `difficult: budget` before its next step
starts (`check_case_budget`). A tuning at or past its budget is held, fleet-wide, before a job's
step starts (workers.job_run, `tuning_hold`): its jobs wait until the budget is raised or
`tunefleet resume TUNING`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from service.core.io.files import append_line, read_model
from service.core.models.records import ApplyRecord, Feedback, RunRecord, Spend, Usage
from service.core.models.tuning import Budget
from service.core.store import CaseStore
from service.core.validation import valid_only
from workers.errors import OverBudget

LEDGER_FILE = "spent.jsonl"
"""In the case's folder: one `Spend` per line."""


def ledger(root: Path) -> list[Spend]:
    """The spends in a case folder's ledger (a torn last line is skipped)."""
    try:
        lines = (root / LEDGER_FILE).read_text().splitlines()
    except FileNotFoundError:
        return []
    return valid_only(Spend, lines)


def note_spend(root: Path, spend: Spend) -> bool:
    """Append usage that no record will keep to the ledger of the case folder `root`, at once (no
    await: safe while the step is being cancelled); False when there was nothing to count. Not fenced:
    it was spent, whoever holds the case now."""
    if spend.usage.tokens == 0 and spend.usage.cost_usd == 0:
        return False
    append_line(root / LEDGER_FILE, spend.model_dump_json())
    return True


def refused_usage(raw: bytes | None) -> Usage:
    """The usage an agent reported in output the fleet refused (nothing if it reported none)."""
    try:
        return Usage.model_validate(json.loads(raw or b"null")["usage"])
    except (ValueError, TypeError, KeyError, ValidationError):
        return Usage()


class CaseSpend(NamedTuple):
    """What one walk of a case's tries finds (`case_usage`)."""

    usage: Usage
    """Tokens and cost of every recorded step (void tries included) and of the ledger."""
    steps: int
    """The steps recorded."""
    flaky: bool
    """Two graded runs of one phase on one version disagreed: one passed, another failed (tries set aside
    as void not counted)."""


def case_usage(store: CaseStore) -> CaseSpend:
    """Tokens and cost of every recorded step (void tries included) and of the ledger, how many steps
    were recorded, and whether graded runs disagreed, in one walk of the case's tries. Only the fleet's
    own records count: a grade must name the run it graded and an apply the grade it applied (their
    seals), so that nothing an agent left in an attempt folder is added."""
    total = Usage()
    steps = 0
    verdicts: dict[tuple[str, str], set[str]] = {}
    for attempt_dir in store.try_folders():
        run = read_model(attempt_dir / "run.json", RunRecord)
        feedback = read_model(attempt_dir / "feedback.json", Feedback)
        for usage in _recorded_usages(run, feedback, read_model(attempt_dir / "apply.json", ApplyRecord)):
            total += usage
            steps += 1
        if attempt_dir.name.isdigit() and run and feedback and feedback.verdict != "void":
            verdicts.setdefault((attempt_dir.parent.name, run.version), set()).add(feedback.verdict)
    for spend in ledger(store.root):
        total += spend.usage
    return CaseSpend(total, steps, any(len(seen) > 1 for seen in verdicts.values()))


def _recorded_usages(
    run: RunRecord | None, feedback: Feedback | None, applied: ApplyRecord | None
) -> list[Usage]:
    """The usages one try's records count: its run's, its grade's when it graded that run (and the run
    was not void), its apply's when it applied that grade."""
    graded = feedback is not None and run is not None and feedback.run_seal == run.seal
    found = [
        run.output.usage if run else None,
        feedback.usage if feedback and graded and not (run and run.void) else None,
        applied.output.usage
        if applied and graded and feedback and applied.feedback_seal == feedback.seal
        else None,
    ]
    return [usage for usage in found if usage is not None]


def check_case_budget(store: CaseStore, budget: Budget) -> None:
    """Raise OverBudget when the case's spend so far is at or past its budget (the budget the worker
    read with the tuning; the caller asks only when it bounds the case: `Budget.bounds_case`)."""
    usage = case_usage(store).usage
    reason = budget.case_over(usage.tokens, usage.cost_usd)
    if reason is not None:
        raise OverBudget(reason)
