"""What the tuning's report (`REPORT.md`, service.kinds.evals.report) says of its gates, counted from the
store: each attempt's `gate.json` (a candidate judged) and `apply.json` (what became of it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.core.io.files import read_model
from service.core.models.records import ApplyRecord, Usage
from service.core.store import TuningStore
from service.kinds.evals.gate.models import GateRecord

GATE_FILE = "gate.json"


class GateTally(BaseModel):
    """A tuning's gates, from its attempt folders."""

    model_config = ConfigDict(extra="forbid")

    applies: int = Field(default=0, description="Applies that went through a gate to a verdict.")
    passed: int = 0
    rejected: int = 0
    rebased: int = Field(default=0, description="Of `passed`, published on a newer current version.")
    broken: dict[str, int] = Field(
        default_factory=dict, description="Case -> how many rejected candidates broke it."
    )
    usage: Usage = Field(default_factory=Usage, description="What the gates' items spent.")
    runs: int = Field(default=0, description="Graded runs the gates read, on candidates and bases.")
    early: int = Field(default=0, description="Gates whose test stopped before its last round.")
    rules: dict[str, int] = Field(default_factory=dict, description="Rule -> gates it judged.")
    decisions: list[str] = Field(
        default_factory=list, description="Each test-judged gate's answer, one line each, oldest first."
    )


def gate_tally(tuning: TuningStore) -> GateTally | None:
    """The tuning's gates (None when it never gated an apply)."""
    tally = GateTally()
    for case in tuning.latest_revs():
        for _, _, paths in case.attempts():
            gate = read_model(paths.root / GATE_FILE, GateRecord)
            applied = read_model(paths.apply, ApplyRecord)
            if gate is None or applied is None or applied.gate is None:
                continue
            tally.applies += 1
            tally.usage += gate.usage
            tally.runs += gate.runs
            tally.rules[gate.rule] = tally.rules.get(gate.rule, 0) + 1
            if gate.test is not None:
                tally.early += gate.test.stopped_early
                tally.decisions.append(f"{case.case_id}: {gate.why}")
            if applied.rejected:
                tally.rejected += 1
                for broken in applied.gate.broken:
                    tally.broken[broken] = tally.broken.get(broken, 0) + 1
            else:
                tally.passed += 1
                tally.rebased += applied.gate.rebased
    return tally if tally.applies else None


def gate_lines(tally: GateTally | None) -> list[str]:
    """The report's section on the gates."""
    if tally is None:
        return []
    lines = [
        "## Acceptance gate",
        "",
        "| applies gated | passed and published | of which re-based | rejected | runs read (a gate) "
        "| stopped early | gate tokens | gate USD |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {tally.applies} | {tally.passed} | {tally.rebased} | {tally.rejected} | "
        f"{tally.runs} ({tally.runs / tally.applies:.1f}) | {tally.early} | "
        f"{tally.usage.tokens:,} | {tally.usage.cost_usd:.4f} |",
        "",
        "Rules: " + ", ".join(f"{rule} ({n})" for rule, n in sorted(tally.rules.items())) + ".",
        "",
    ]
    if tally.decisions:
        lines += ["The test's answers (difference = candidate minus base pass rate over paired runs):", ""]
        lines += [f"- {line}" for line in tally.decisions]
        lines.append("")
    if tally.broken:
        names = ", ".join(f"{case} ({n})" for case, n in sorted(tally.broken.items()))
        lines += [f"- Cases the rejected candidates broke: {names}", ""]
    return lines


def restored_counters(tuning: TuningStore) -> dict[str, int]:
    """The gate's counters (service.kinds.evals.gate.counters) as the store gives them, for the daemon's
    restore after Redis lost them, and the corrections to the tuning's totals: the gates' spend is in the
    cases' results (their ledgers) and in the gates' evaluations, and must count once."""
    tally = gate_tally(tuning)
    if tally is None:
        return {}
    micros = round(tally.usage.cost_usd * 1_000_000)
    return {
        "gates:started": tally.applies,
        "gates:passed": tally.passed,
        "gates:rejected": tally.rejected,
        "gates:rebased": tally.rebased,
        "gates:runs": tally.runs,
        "gates:early": tally.early,
        "gates:tokens": tally.usage.tokens,
        "gates:cost_usd_micros": micros,
        "tokens": -tally.usage.tokens,
        "tokens_unmeasured": -tally.usage.unmeasured_tokens,
        "cost_usd_micros": -micros,
    }
