"""What a case and its tuning have spent, and the budgets that bound it.

A case's spend is the usage of its recorded steps plus its ledger, `spent.jsonl`: usage that no
record keeps (an analyzer round whose feedback was refused, an apply abandoned after its lock was
lost). A case at or past its budget ends `difficult: budget` before its next step starts
(`check_case_budget`); a tuning at or past its budget is held, fleet-wide, before a run starts
(`tuning_hold`): its cases wait until the budget is raised or `tunefleet resume TUNING`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from service.core import keys
from service.core.events import COST_SCALE
from service.core.files import append_line, read_model
from service.core.models.records import ApplyRecord, Feedback, Phase, RunRecord, Spend, StepName, Usage
from service.core.models.status import Hold
from service.core.models.tuning import Budget
from workers.case import CaseRun

LEDGER_FILE = "spent.jsonl"
"""In the case's folder: one `Spend` per line."""


class OverBudget(Exception):
    """The case spent its budget: it ends `difficult` with this reason."""

    def __init__(self, phase: Phase, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase
        self.reason = reason


def ledger(root: Path) -> list[Spend]:
    """The spends in a case folder's ledger (a torn last line is skipped)."""
    try:
        lines = (root / LEDGER_FILE).read_text().splitlines()
    except FileNotFoundError:
        return []
    spends = []
    for line in lines:
        try:
            spends.append(Spend.model_validate_json(line))
        except ValidationError:
            continue
    return spends


def note_spend(cr: CaseRun, phase: Phase, attempt: int, step: StepName, usage: Usage, why: str) -> bool:
    """Append usage that no record will keep to the case's ledger, at once (no await: safe while the
    step is being cancelled); False when there was nothing to count. Not fenced: it was spent, whoever
    holds the case now."""
    if usage.tokens == 0 and usage.cost_usd == 0:
        return False
    spend = Spend(at=datetime.now(UTC), phase=phase, attempt=attempt, step=step, usage=usage, why=why)
    append_line(cr.store.root / LEDGER_FILE, spend.model_dump_json())
    return True


async def record_spend(
    cr: CaseRun, phase: Phase, attempt: int, step: StepName, usage: Usage, why: str
) -> None:
    """`note_spend`, and a `spend_recorded` event, which adds it to the tuning's tokens and cost."""
    if note_spend(cr, phase, attempt, step, usage, why):
        await cr.emit(
            "spend_recorded",
            step=step,
            phase=phase,
            attempt=attempt,
            tokens=usage.tokens,
            cost_usd=usage.cost_usd,
            unmeasured_tokens=usage.unmeasured_tokens,
            estimated_tokens=usage.estimated_tokens,
            detail=why,
        )


def refused_usage(raw: bytes | None) -> Usage:
    """The usage an agent reported in output the fleet refused (nothing if it reported none)."""
    try:
        return Usage.model_validate(json.loads(raw or b"null")["usage"])
    except (ValueError, TypeError, KeyError, ValidationError):
        return Usage()


def case_usage(cr: CaseRun) -> tuple[Usage, int]:
    """Tokens and cost of every recorded step (void tries included) and of the ledger, and how many
    steps were recorded. Only the fleet's own records count: a grade must name the run it graded and
    an apply the grade it applied (their seals), so that nothing an agent left in an attempt folder
    is added."""
    total = Usage()
    steps = 0
    for phase in ("nomem", "mem"):
        folder = cr.store.root / phase
        if not folder.is_dir():
            continue
        for attempt_dir in folder.iterdir():
            if not attempt_dir.is_dir():
                continue
            run = read_model(attempt_dir / "run.json", RunRecord)
            feedback = read_model(attempt_dir / "feedback.json", Feedback)
            applied = read_model(attempt_dir / "apply.json", ApplyRecord)
            graded = feedback is not None and run is not None and feedback.run_seal == run.seal
            for usage in (
                run.output.usage if run else None,
                feedback.usage if feedback and graded and not (run and run.void) else None,
                applied.output.usage
                if applied and graded and feedback and applied.feedback_seal == feedback.seal
                else None,
            ):
                if usage is not None:
                    total += usage
                    steps += 1
    for spend in ledger(cr.store.root):
        total += spend.usage
    return total, steps


def budget_of(cr: CaseRun) -> Budget:
    """The tuning's budget as registered now (raised budgets count before the worker rebuilds)."""
    if cr.tuning.is_stale():
        return cr.tuning.store.config().budget
    return cr.tuning.config.budget


def check_case_budget(cr: CaseRun, phase: Phase) -> None:
    """Raise OverBudget when the case's spend so far is at or past its budget (the budget the worker
    read with the tuning: a step without one costs nothing here, not even a stat of the config)."""
    budget = cr.tuning.config.budget
    if budget.case_max_tokens is None and budget.case_max_usd is None:
        return
    usage, _ = case_usage(cr)
    reason = budget.case_over(usage.tokens, usage.cost_usd)
    if reason is not None:
        raise OverBudget(phase, reason)


async def tuning_hold(cr: CaseRun) -> Hold | None:
    """The tuning's hold, set here first if its spend (the live counters) is at or past its budget
    and `tunefleet resume TUNING` did not waive that budget."""
    held = cr.controls.held(cr.tuning.name)
    if held is not None:
        return held
    cached = cr.tuning.config.budget
    if cached.tuning_max_tokens is None and cached.tuning_max_usd is None:
        return None  # a tuning registered without one: no stat of its config at every run start
    budget = budget_of(cr)
    if budget.tuning_max_tokens is None and budget.tuning_max_usd is None:
        return None
    async with cr.sink.redis.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.stats(cr.tuning.name), ["tokens", "cost_usd_micros"])
        pipe.hget(keys.budget_waived(), cr.tuning.name)
        (tokens, micros), waived = await pipe.execute()
    reason = budget.tuning_over(int(tokens or 0), int(micros or 0) / COST_SCALE)
    if reason is None or (waived is not None and waived.decode() == budget.model_dump_json()):
        return None
    if await cr.controls.hold(cr.tuning.name, "budget", reason):
        await cr.emit("tuning_held", detail=reason, data={"kind": "budget"})
    return cr.controls.held(cr.tuning.name)
