"""The GEPA arm of `bench quality`: the `gepa` package (PyPI, the bench's optional dependencies) tuning
the same prose on the same noisy world, with tunefleet's demo agents re-used in pure Python as its
evaluator and tunefleet's demo applier's rule as its `custom_candidate_proposer`.

- A candidate is one component, `prose`: the imported instructions and one `- rule: <slug>` line per
  rule it holds.
- One metric call is one graded run of one training case: the run passes with the ground truth's
  probability (service.kinds.cases.truth.run_pass_p), the grader flips its verdict with `judge_flip`,
  each drawn with workers.adapters.demo_chance.uniform keyed by the seed, the case, the prose's rules
  and how often that (case, prose) was run before, as the fleet keys a run by its try. The score is 1
  for a pass verdict, else 0. A failing verdict carries the demo analyzer's feedback: `add rule <slug>`
  for every rule the case needs and the prose lacks.
- The proposer is the demo applier: it adds the first rule that the analyses of the reflection
  minibatch asked for and the prose lacks (one per edit, as `rules_per_apply: 1`).
- Its train set and its validation set are the training cases (the held-out ones are never shown to
  any arm); `max_metric_calls` is the budget; the final version is GEPA's best candidate.

An edit is GEPA's proposal; it is published when GEPA accepts it into its pool (its minibatch test,
GEPA's gate) and rejected when GEPA rejects it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gepa.api import optimize
from gepa.core.adapter import EvaluationBatch

from bench.quality_world import Outcome, World
from service.kinds.cases.truth import RULE_PREFIX, run_pass_p
from workers.adapters.demo import ADD_RULE_LEAD
from workers.adapters.demo_chance import uniform

COMPONENT = "prose"
HEAD = "# Support agent\n\nYou answer customer questions about the billing system.\n\n"


def prose_of(rules: frozenset[str]) -> str:
    return HEAD + "".join(f"{RULE_PREFIX}{rule}\n" for rule in sorted(rules))


def rules_of(text: str) -> frozenset[str]:
    lines = (line.strip() for line in text.splitlines())
    return frozenset(line.removeprefix(RULE_PREFIX) for line in lines if line.startswith(RULE_PREFIX))


@dataclass
class Graded:
    """One graded run: its case, its verdict and what the analysis asked for."""

    case: str
    passed: bool
    asked: list[str]


class DemoWorldAdapter:
    """GEPA's adapter onto the demo world: each example is a training case's id."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.seed = seed
        self.runs: Counter[tuple[str, frozenset[str]]] = Counter()
        self.metric_calls = 0

    def grade(self, case: str, held: frozenset[str]) -> Graded:
        knobs = self.world.train_knobs[case]
        index = self.runs[(case, held)]
        self.runs[(case, held)] += 1
        self.metric_calls += 1
        key = (self.seed, "gepa", case, ",".join(sorted(held)), index)
        ran = uniform(*key, "run") < run_pass_p(knobs, held)
        flipped = uniform(*key, "judge") < self.world.judge_flip
        passed = (ran != flipped) and not knobs.flawed
        asked = [] if passed else [rule for rule in knobs.rules if rule not in held]
        return Graded(case, passed, asked)

    def evaluate(
        self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch[Graded, Graded]:
        held = rules_of(candidate[COMPONENT])
        results = [self.grade(case, held) for case in batch]
        return EvaluationBatch(
            outputs=results,
            scores=[1.0 if r.passed else 0.0 for r in results],
            trajectories=results if capture_traces else None,
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: EvaluationBatch[Graded, Graded], components: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        records = [
            {
                "case": r.case,
                "verdict": "pass" if r.passed else "fail",
                "improvements": [f"{ADD_RULE_LEAD}{rule}" for rule in r.asked],
            }
            for r in eval_batch.trajectories or []
        ]
        return dict.fromkeys(components, records)

    propose_new_texts = None


class EditLog:
    """The demo applier as GEPA's proposer, and GEPA's verdict on each of its edits (callbacks)."""

    def __init__(self, world: World, outcome: Outcome) -> None:
        self.world = world
        self.outcome = outcome
        self.pending: tuple[frozenset[str], frozenset[str]] | None = None

    def propose(
        self,
        candidate: dict[str, str],
        reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        held = rules_of(candidate[COMPONENT])
        for record in reflective_dataset.get(COMPONENT, []):
            for lead in record["improvements"]:
                rule = str(lead).removeprefix(ADD_RULE_LEAD)
                if rule not in held:
                    self.pending = (held, held | {rule})
                    return {COMPONENT: prose_of(held | {rule})}
        self.pending = None
        return dict(candidate)

    def _judged(self, published: bool) -> None:
        if self.pending is not None:
            before, after = self.pending
            self.outcome.count(self.world.classify(before, after), published, judged=True)
            self.pending = None

    def on_candidate_accepted(self, event: Mapping[str, Any]) -> None:
        self._judged(True)

    def on_candidate_rejected(self, event: Mapping[str, Any]) -> None:
        self._judged(False)


def run_gepa(world: World, seed: int, budget: int) -> Outcome:
    """GEPA on one seed with `budget` metric calls, scored against the truth."""
    adapter = DemoWorldAdapter(world, seed)
    outcome = Outcome(frozenset(), 0.0, graded_runs=0)
    edits = EditLog(world, outcome)
    train = [str(c["id"]) for c in world.train]
    result: Any = optimize(
        seed_candidate={COMPONENT: prose_of(world.imported)},
        trainset=train,
        valset=train,
        adapter=adapter,  # type: ignore[arg-type]
        custom_candidate_proposer=edits.propose,
        max_metric_calls=budget,
        callbacks=[edits],  # type: ignore[list-item]
        seed=seed,
        raise_on_exception=True,
        logger=_Quiet(),
    )
    best = result.best_candidate
    text = best[COMPONENT] if isinstance(best, dict) else str(best)
    outcome.final_rules = rules_of(text)
    outcome.heldout_rate = world.heldout_rate(outcome.final_rules)
    outcome.graded_runs = adapter.metric_calls
    return outcome


class _Quiet:
    """GEPA's logger, silenced (the bench prints its own table)."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        return None
