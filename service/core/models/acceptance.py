"""The acceptance gate's contracts in the core: its section of a tuning file (`gate:`) and its counts in a
tuning's status; the gate itself is part of the evaluation slice (service.kinds.evals.gate).

`gate:` in a tuning file: which cases a candidate version is evaluated on, how many, how often, and
the rule that accepts it. No `gate:` (the default): every apply is published as it is made."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from service.core.models.records import COST_SCALE

GateCases = Literal["passed", "folder", "both"]
"""`passed`: the tuning's cases that have passed (completed); `folder`: the cases of a fixed regression
folder; `both`: the two together."""

GateRule = Literal["strict", "max_drop", "test"]
"""How a gate judges a candidate from its paired runs (service.kinds.evals.gate.rule): `strict`, no
pair whose base run passed may fail on the candidate; `max_drop`, the pass rate may drop by at most
`max_drop`; `test`, a sequential test must rule out, at level `alpha`, a drop of `min_effect` or more
(service.kinds.evals.gate.sequential)."""

TEST_ONLY = ("alpha", "beta", "min_effect", "max_repeats")
"""The fields that only the `test` rule reads."""
DEFAULT_MAX_REPEATS = 100
"""Rule test's default bound on runs of each gate case on each side: enough that 4 or more gate cases reach
the pairs the design plans at the defaults (about 400 with cases that pass 80 % of their runs)."""


class GateConfig(BaseModel):
    """The acceptance gate on every apply."""

    model_config = ConfigDict(extra="forbid")

    cases: GateCases = Field(default="passed", description="Where the gate's cases come from.")
    folder: Path | None = Field(
        default=None,
        description="A folder of regression cases (relative to the tuning file), for cases `folder` or "
        "`both`.",
    )
    sample: int = Field(
        default=20, ge=1, le=10_000, description="At most this many gate cases, drawn with `seed`."
    )
    seed: int = Field(default=0, description="Seeds the draw of the sample.")
    repeats: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Runs of each gate case on the candidate and on its base in each round (rules strict "
        "and max_drop run one round).",
    )
    rule: GateRule | None = Field(
        default=None,
        description="The rule; unset: `max_drop` when `max_drop` is given, else `test`.",
    )
    max_drop: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Rule max_drop: the pass rate over the paired runs may drop by at most this much.",
    )
    alpha: PositiveFloat = Field(
        default=0.05,
        lt=0.5,
        description="Rule test: the most often a candidate that lowers the pass rate by `min_effect` or "
        "more may be published.",
    )
    beta: float = Field(
        default=0.1,
        gt=0,
        lt=0.5,
        description="Rule test: the most often a harmless candidate (no drop) may be rejected, when the "
        "gate's cases times `max_repeats` reach the pairs the design plans.",
    )
    min_effect: PositiveFloat = Field(
        default=0.1, lt=1, description="Rule test: the drop of the pass rate the test guards against."
    )
    own_case: bool | None = Field(
        default=None,
        description="Run the applying case itself among the gate's cases (on its base it failed: what the "
        "edit fixes counts beside what it breaks). Unset: on for rule test, off for the others.",
    )
    max_repeats: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Rule test: the most runs of each gate case on each side; rounds (each at least "
        "`repeats`, sized to the design's plan) are added while the test is undecided. Unset: 100, or "
        "`repeats` if more.",
    )

    @model_validator(mode="after")
    def _one_rule(self) -> GateConfig:
        """The rule resolved, and fields that the rule would not read refused (one line naming them)."""
        if self.rule is None:
            self.rule = "max_drop" if self.max_drop is not None else "test"
        if self.rule == "max_drop" and self.max_drop is None:
            raise ValueError("gate.max_drop: rule max_drop needs max_drop, a drop in [0, 1]")
        if self.rule != "max_drop" and self.max_drop is not None:
            raise ValueError(f"gate.max_drop: only rule max_drop reads it (the rule is {self.rule})")
        unread = [  # a default is no choice (and a stored config repeats every default)
            name
            for name in TEST_ONLY
            if name in self.model_fields_set and getattr(self, name) != type(self).model_fields[name].default
        ]
        if self.rule != "test" and unread:
            raise ValueError(f"gate.{unread[0]}: only rule test reads it (the rule is {self.rule})")
        if self.own_case is None:
            self.own_case = self.rule == "test"
        if self.rule == "test" and self.max_repeats is None:
            self.max_repeats = max(DEFAULT_MAX_REPEATS, self.repeats)
        if self.rule == "test" and self.max_repeats is not None and self.max_repeats < self.repeats:
            raise ValueError(
                f"gate.max_repeats: {self.max_repeats} is fewer than one round of repeats ({self.repeats})"
            )
        return self

    @property
    def judged_by(self) -> GateRule:
        """The rule (resolved at validation)."""
        assert self.rule is not None
        return self.rule

    @property
    def most_repeats(self) -> int:
        """The most runs of each gate case on each side: `max_repeats` for test, one round for the others."""
        if self.rule != "test" or self.max_repeats is None:
            return self.repeats
        return self.max_repeats

    approval: Literal["auto", "manual"] = Field(
        default="auto",
        description="`auto`: a candidate the gate passes is published. `manual`: it waits for a person "
        "(`tunefleet approve|reject TUNING CANDIDATE`), its case parked without a worker slot.",
    )

    def needs_folder(self) -> bool:
        return self.cases in ("folder", "both")


COUNTS_PREFIX = "gates:"
"""The gate's counters in a tuning's counters hash (service.kinds.evals.gate.counters moves them)."""


def gate_fields(counts: dict[str, int]) -> dict[str, int]:
    """The gate's counters of a tuning's counters hash, by name (`started`, `under`, ...)."""
    return {
        field[len(COUNTS_PREFIX) :]: value
        for field, value in counts.items()
        if field.startswith(COUNTS_PREFIX)
    }


class GateCounts(BaseModel):
    """A tuning's gates as status shows them, from its counters (None when it never gated an apply)."""

    model_config = ConfigDict(extra="forbid")

    under: int = Field(default=0, description="Candidates under gate now.")
    started: int = 0
    passed: int = 0
    rejected: int = 0
    rebased: int = 0
    runs: int = Field(default=0, description="Graded runs the judged gates read, candidate and base.")
    early: int = Field(default=0, description="Judged gates whose test stopped before its last round.")
    tokens: int = Field(default=0, description="What the gates' items spent (within the tuning's tokens).")
    cost_usd: float = 0.0

    @classmethod
    def of(cls, counts: dict[str, int]) -> GateCounts | None:
        fields = gate_fields(counts)
        if not fields:
            return None
        return cls(
            under=max(0, fields.get("under", 0)),
            started=fields.get("started", 0),
            passed=fields.get("passed", 0),
            rejected=fields.get("rejected", 0),
            rebased=fields.get("rebased", 0),
            runs=fields.get("runs", 0),
            early=fields.get("early", 0),
            tokens=fields.get("tokens", 0),
            cost_usd=fields.get("cost_usd_micros", 0) / COST_SCALE,
        )

    def line(self) -> str:
        """One line for the terminal: under gate, passed, rejected, re-based, runs, and their cost."""
        judged = self.passed + self.rejected
        runs = f"{self.runs} runs ({self.runs / judged:.1f} a gate), " if judged and self.runs else ""
        return (
            f"{self.under} under gate, {self.passed} passed, {self.rejected} rejected, "
            f"{self.rebased} re-based, {self.early} stopped early; gates read {runs}"
            f"spent {self.tokens} tokens, ${self.cost_usd:.4f}"
        )
