"""The demo world's ground truth: from a case's demo knobs and the rules a system version's prose holds,
the exact probability that one run of the built-in demo agents is graded a pass. No sampling: this is
what the demo runner's and analyzer's seeded draws (workers.adapters.demo_chance) converge to, so that
a tuning's decisions can be scored against the truth (issue 49).

A run's chance of passing, before it is graded:

- 0 when the prose holds a rule the case `forbids`, or, in phase `mem`, when no memory came in or the
  case's `memory_helps` is off;
- else `pass_p` when the prose holds every rule the case needs, `miss_p` when it lacks one;
- times the factor of every rule in `harms` that the prose holds.

The demo analyzer then flips its verdict with probability `judge_flip` (an adapter setting), so a run
is graded a pass with probability p (1 - f) + (1 - p) f. A `flawed` case is graded a fail whatever the
run did (its finding concerns the case, not luck): 0.

The service reads this module (`tunefleet demo` prints the true held-out pass rates) and so do the
workers (the demo agents); it imports nothing of the workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Set
from math import prod
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.core.errors import ConfigError
from service.core.models.case import DemoMapping, Slug
from service.core.models.records import Phase
from service.core.validation import describe_validation

RULE_PREFIX = "- rule: "
"""A line of the system's prose that holds a rule: `- rule: <slug>`."""

Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class WorldKnobs(BaseModel):
    """The demo knobs that decide whether a run passes (workers.adapters.demo_knobs.DemoKnobs adds the
    faults, the latency and the tokens); other keys of a case's demo mapping are ignored here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    rules: list[Slug] = Field(
        default_factory=list,
        description="Rules the system's prose must hold for a run to pass at `pass_p`; each apply adds the "
        "missing ones.",
    )
    forbids: list[Slug] = Field(
        default_factory=list,
        description="Rules the system's prose must not hold for a run to pass: an apply that adds one for "
        "another case breaks this one.",
    )
    flawed: bool = Field(default=False, description="The case itself is wrong: findings target the dataset.")
    memory_helps: bool = Field(default=True, description="A run that starts from memory passes.")
    pass_p: Probability = Field(
        default=1.0,
        description="The probability that a run passes when the prose holds every rule in `rules`.",
    )
    miss_p: Probability = Field(
        default=0.0,
        description="The probability that a run passes while the prose lacks a rule in `rules`.",
    )
    harms: dict[Slug, Probability] = Field(
        default_factory=dict,
        description="Rule -> factor in [0, 1]: while the prose holds the rule, the run's probability of "
        "passing is multiplied by it (the chance form of `forbids`).",
    )


def world_knobs(demo: DemoMapping, owner: str) -> WorldKnobs:
    """The chance knobs of `owner`'s demo mapping; ConfigError in one line naming the field when one is
    not valid (`<owner>: demo: field 'pass_p': ...`)."""
    try:
        return WorldKnobs.model_validate(demo)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, f"{owner}: demo")) from None


def prose_rules(system_dir: Path) -> set[str]:
    """The rules the prose holds: every `- rule: <slug>` line of every file (outside `.git`)."""
    rules: set[str] = set()
    for folder, folders, files in os.walk(system_dir):  # links to folders not followed, as rglob
        folders[:] = [name for name in folders if name != ".git"]
        for name in files:
            path = os.path.join(folder, name)
            if name != ".git" and os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as text:
                    rules.update(_rule_lines(text.read()))
    return rules


def _rule_lines(text: str) -> Iterator[str]:
    """The slugs of a text's `- rule: <slug>` lines."""
    for line in text.splitlines():
        if line.strip().startswith(RULE_PREFIX):
            yield line.strip().removeprefix(RULE_PREFIX)


def run_pass_p(knobs: WorldKnobs, held: Set[str], phase: Phase = "nomem", has_memory: bool = False) -> float:
    """The probability that one run passes, before it is graded, on prose holding the rules `held`."""
    if any(rule in held for rule in knobs.forbids):
        return 0.0
    if phase == "mem" and not (knobs.memory_helps and has_memory):
        return 0.0
    base = knobs.miss_p if any(rule not in held for rule in knobs.rules) else knobs.pass_p
    return base * prod(factor for rule, factor in knobs.harms.items() if rule in held)


def graded(run_p: float, judge_flip: float) -> float:
    """The probability of a pass verdict when the run passes with `run_p` and the judge flips its verdict
    with `judge_flip`."""
    return run_p * (1 - judge_flip) + (1 - run_p) * judge_flip


def graded_pass_p(
    knobs: WorldKnobs,
    held: Set[str],
    judge_flip: float = 0.0,
    phase: Phase = "nomem",
    has_memory: bool = False,
) -> float:
    """The probability that one run of the case on prose holding `held` is graded a pass."""
    if knobs.flawed:
        return 0.0
    return graded(run_pass_p(knobs, held, phase, has_memory), judge_flip)


def pass_rate(cases: Iterable[WorldKnobs], held: Set[str], judge_flip: float = 0.0) -> float:
    """The expected pass rate of an evaluation of a version (runs without memory, every case repeated
    as often): the mean of the cases' graded pass probabilities; 0 for no case."""
    chances = [graded_pass_p(knobs, held, judge_flip) for knobs in cases]
    return sum(chances) / len(chances) if chances else 0.0


def edit_effect(
    cases: Iterable[WorldKnobs], before: Set[str], after: Set[str], judge_flip: float = 0.0
) -> float:
    """How much an edit that turns prose holding `before` into prose holding `after` changes the expected
    pass rate on `cases`: above 0 it truly helps them, below 0 it truly harms them (a gate's error, or a
    bench's score of one, is judged by it)."""
    chosen = list(cases)
    return pass_rate(chosen, after, judge_flip) - pass_rate(chosen, before, judge_flip)
