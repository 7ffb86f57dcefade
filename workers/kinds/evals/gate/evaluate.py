"""A candidate's gate: the candidate version and its base run on the gate's cases, as eval items on the
fleet (workers.kinds.evals) while the applying case waits, its slot lent to them; then the rule's verdict.

The gate is paired and runs in rounds. Each round runs every gate case `repeats` times on the candidate
(one evaluation of this gate per round) and as many times on the base version: one evaluation per
(base, case, round), named after those alone, so that every gate on that base reads the same base runs
(its results are kept per version, case and repeat) and none pays for them twice. "It passed once" is
never a baseline. Rules strict and max_drop judge after one round; rule test judges after each round
and adds another only while its answer is open, up to `max_repeats`: the first round runs `repeats`,
each next one about a fifth of the pairs the test's design plans (service.kinds.evals.gate.rule.
next_repeats), so that a gate with few cases runs more repeats of each rather than rejecting. With
`own_case` (rule test's default) the applying case itself is among the gate's cases.
The gate's evaluations are named after what they judge, so that a worker that takes the case over finds
the ones its predecessor launched and waits for them instead of paying for more.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.core import keys
from service.core.errors import TunefleetError
from service.core.models.case import Case
from service.core.models.events import EventKind
from service.core.models.records import Phase, Usage
from service.kinds.evals.counters import OUTCOMES
from service.kinds.evals.fleet import Evals
from service.kinds.evals.gate.cases import choose
from service.kinds.evals.gate.models import Candidate, GateItem, GateRecord
from service.kinds.evals.gate.rule import Judgement, judge, next_repeats, pairs_of
from service.kinds.evals.gate.sequential import Pairs
from service.kinds.evals.models import EvalCaseRef, EvalSpec, ItemResult, Purpose
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.events import candidate_event
from workers.spend import ledger

log = structlog.get_logger()

POLL_S = 0.2
"""How often a case waiting for its gate looks at the gate's ended-item counters."""
RESCAN_S = 5.0
"""The longest a waiting gate goes without walking its items' folders, whatever the counters say."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:20]


def _spec(
    case_run: CaseRun, eval_id: str, purpose: Purpose, version: str, cases: list[Case], repeats: int
) -> EvalSpec:
    return EvalSpec(
        id=eval_id,
        tuning=case_run.tuning.name,
        purpose=purpose,
        version_asked=version,
        version=version,
        source="gate",
        cases=[EvalCaseRef(id=case.id, rev=case.rev) for case in cases],
        repeats=repeats,
        created_at=datetime.now(UTC),
    )


async def _outcomes(redis: Redis, evals: Evals, spec: EvalSpec) -> dict[tuple[str, int], ItemResult]:
    """Every item's outcome, once each item has one (the case's lease heartbeats meanwhile).

    A poll is one HMGET of the evaluation's ended-item counters; the items' folders are walked (off the
    event loop) only when those moved, or RESCAN_S after the last walk should the counters have missed
    an end (Redis lost and restored, say): a gate waiting on many items costs its worker no disk walk
    per poll."""
    found = evals.folder.eval(spec.id)
    wanted = [(case.id, k) for case, k in spec.items()]
    fields = [f"eval:{spec.id}:{outcome}" for outcome in OUTCOMES]
    seen: int | None = None
    walked_s = float("-inf")
    while True:
        counts = await redis.hmget(keys.stats(spec.tuning), fields)  # type: ignore[misc]
        ended = sum(int(count or 0) for count in counts)
        if ended != seen or time.monotonic() - walked_s >= RESCAN_S:
            seen, walked_s = ended, time.monotonic()
            outcomes = (await asyncio.to_thread(found.scan)).outcomes
            if all(item in outcomes for item in wanted):
                return outcomes
        await asyncio.sleep(POLL_S)


def _verdict(outcome: ItemResult | None) -> str | None:
    return outcome.verdict if outcome is not None and outcome.state == "graded" else None


@dataclass
class Gathered:
    """What a gate's rounds gave so far."""

    cases: list[Case]
    items: list[GateItem] = field(default_factory=list)
    history: list[Pairs] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    runs: int = 0
    rounds: int = 0
    repeats_done: int = 0


def _base_id(tuning: str, base: str, case: Case, offset: int, repeats: int) -> str:
    """The evaluation of one case's repeats offset + 1 to offset + repeats on a base version: shared by
    every gate on that base that asks for those repeats."""
    return f"gate-base-{_digest(tuning, base, f'{case.id}@{case.rev}', str(offset), str(repeats))}"


async def gate_candidate(case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate) -> GateRecord:
    """Evaluate the candidate and its base on the gate's cases, round by round while the rule is open,
    and judge it (gate.json's content)."""
    config = case_run.tuning.config.gate
    assert config is not None
    # from the gate's index of the cases that passed: one read per case drawn (gate.index)
    chosen = await choose(
        case_run.runtime.redis, config, case_run.tuning.store, case_run.tuning.held_out, case_run.case.id
    )
    cases = chosen.all
    if config.own_case and all(case.id != case_run.case.id for case in cases):
        cases = sorted([*cases, case_run.case], key=lambda c: c.id)
    if not cases:
        return GateRecord(
            candidate=candidate.version,
            base=candidate.base,
            eval=None,
            verdict="passed",
            why="no case to gate on",
            rule=config.judged_by,
            rounds=0,
        )
    key = (
        f"{case_run.tuning.name}/{case_run.case.id}/{case_run.case.rev}/{phase}/{attempt}/{candidate.version}"
    )
    first_id = f"gate-{_digest(key)}"
    evals = Evals(case_run.runtime.redis, case_run.runtime.store, case_run.settings)
    gathered = Gathered(cases=cases)
    most = config.most_repeats
    repeats = min(config.repeats, most)
    round_no = 0
    while True:
        round_no += 1
        eval_id = first_id if round_no == 1 else f"{first_id}-r{round_no}"
        judgement = await _round(
            case_run, phase, attempt, candidate, evals, eval_id, round_no, repeats, gathered
        )
        done = gathered.repeats_done
        repeats = next_repeats(judgement.test, len(gathered.cases), done, config.repeats, most)
        if judgement.verdict is not None:
            break
    _charge_case(case_run, phase, attempt, first_id, gathered.usage)
    return GateRecord(
        candidate=candidate.version,
        base=candidate.base,
        eval=first_id,
        verdict=judgement.verdict,
        why=judgement.why,
        items=gathered.items,
        broken=judgement.broken,
        baseline_rate=judgement.baseline_rate,
        candidate_rate=judgement.candidate_rate,
        rule=config.judged_by,
        test=judgement.test,
        rounds=gathered.rounds,
        runs=gathered.runs,
        usage=gathered.usage,
    )


async def _round(
    case_run: CaseRun,
    phase: Phase,
    attempt: int,
    candidate: Candidate,
    evals: Evals,
    eval_id: str,
    round_no: int,
    repeats: int,
    gathered: Gathered,
) -> Judgement:
    """One round: each gate case `repeats` more times on the candidate (an evaluation of this gate) and on
    the base (one evaluation per case and repeats, shared by every gate on that base); then the rule on
    every pair so far."""
    config = case_run.tuning.config.gate
    assert config is not None
    offset = gathered.repeats_done
    spec = _spec(case_run, eval_id, "gate", candidate.version, gathered.cases, repeats)
    fresh = not evals.folder.eval(spec.id).exists()
    await case_run.lease.check()
    spec = await evals.launch(spec, gathered.cases)
    if [ref.id for ref in spec.cases] != [case.id for case in gathered.cases]:
        # launched by a predecessor on this case, whose draw saw other cases that had passed: its cases
        kept = evals.folder.eval(spec.id)
        gathered.cases = [kept.case(ref.id) for ref in spec.cases]
    base_specs = await _launch_base(case_run, evals, candidate, gathered.cases, offset, repeats)
    if fresh and round_no == 1:
        await candidate_event(
            case_run,
            EventKind.GATE_STARTED,
            phase,
            attempt,
            f"{spec.total} items on candidate {candidate.version[:12]}, as many on its base",
            {"gate_eval": spec.id, "candidate": candidate.version, "items": spec.total},
        )
    case_run.at("apply", phase, attempt, waiting="gate")
    try:
        with case_run.runtime.slots.lent(case_run.job_id):
            outcomes = await _outcomes(case_run.runtime.redis, evals, spec)
            base: dict[tuple[str, int], ItemResult] = {}
            for base_spec in base_specs:
                base.update(await _outcomes(case_run.runtime.redis, evals, base_spec))
    except asyncio.CancelledError:
        if (
            case_run.job_id in case_run.controls.cancelling
        ):  # the user's cancel (not a stopping worker's hand-back)
            await asyncio.shield(_abandon(case_run, phase, attempt, candidate, evals, spec.id))
        raise
    _tally(gathered, spec, outcomes, base, offset)
    gathered.rounds = round_no
    gathered.repeats_done = offset + repeats
    gathered.history.append(pairs_of(gathered.items))
    return judge(config, gathered.items, gathered.history, last=gathered.repeats_done >= config.most_repeats)


async def _launch_base(
    case_run: CaseRun, evals: Evals, candidate: Candidate, chosen: list[Case], offset: int, repeats: int
) -> list[EvalSpec]:
    """The round's evaluations of the base, one per gate case and the repeats asked after `offset` done
    (shared by every gate on that base)."""
    base_specs = [
        _spec(
            case_run,
            _base_id(case_run.tuning.name, candidate.base, case, offset, repeats),
            "gate-base",
            candidate.base,
            [case],
            repeats,
        )
        for case in chosen
    ]
    for index, base_spec in enumerate(base_specs):
        base_specs[index] = await evals.launch(base_spec, [chosen[index]])
    return base_specs


def _tally(
    gathered: Gathered,
    spec: EvalSpec,
    outcomes: dict[tuple[str, int], ItemResult],
    base: dict[tuple[str, int], ItemResult],
    offset: int,
) -> None:
    """The round's items into `gathered`: each item's verdicts on both sides, its usage, its graded runs
    (its repeat numbered after the earlier rounds': `offset`)."""
    for case, k in spec.items():
        outcome = outcomes.get((case.id, k))
        baseline = base.get((case.id, k))
        if outcome is not None:
            gathered.usage += outcome.usage
        gathered.runs += (_verdict(outcome) is not None) + (_verdict(baseline) is not None)
        gathered.items.append(
            GateItem(
                case=case.id,
                repeat=offset + k,
                baseline=_verdict(baseline),
                verdict=_verdict(outcome),
                reason=outcome.reason if outcome is not None else None,
            )
        )


async def _abandon(
    case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate, evals: Evals, eval_id: str
) -> None:
    """The case was cancelled while its gate ran: the gate's unfinished items are cancelled (it judges for
    no one now; the base version's evaluation, shared with other gates, runs on), and the applier's
    usage, which no record holds until the apply's is written, goes into the case's ledger and, with
    the envelope's settling, into the tuning's totals."""
    case_run.unfinished_spend(candidate.output.usage, {"phase": phase, "attempt": attempt, "step": "apply"})
    try:
        await evals.cancel(eval_id)
        await candidate_event(
            case_run,
            EventKind.GATE_ABANDONED,
            phase,
            attempt,
            "the case was cancelled while its candidate was under gate",
            {"gate_eval": eval_id, "candidate": candidate.version},
        )
    except (RedisError, OSError, TunefleetError) as exc:
        log.warning("gate_abandon_failed", eval=eval_id, error=str(exc))


def _charge_case(case_run: CaseRun, phase: Phase, attempt: int, eval_id: str, usage: Usage) -> None:
    """The gate's spend into the case's ledger (its budget counts it), once per gate: the tuning's totals
    counted it already, through the items' own events."""
    why = f"gate {eval_id}"
    if not any(spend.why == why for spend in ledger(case_run.store.root)):
        case_run.note_spend(phase, attempt, "apply", usage, why)
