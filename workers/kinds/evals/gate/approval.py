"""A candidate its gate passed waits for a person (`gate.approval: manual`, service.kinds.evals.approval):
its case is parked, its worker slot lent to other jobs (as while its gate runs), until the decision is in
its attempt folder. One stat of that file per poll; no Redis round trip. With a `remote`, the candidate is
pushed first to a branch of its own, to be reviewed as a pull request."""

from __future__ import annotations

import asyncio

from service.core.errors import TunefleetError
from service.core.io.files import read_model
from service.core.models.events import EventKind
from service.core.models.records import Phase
from service.kinds.evals.approval import DECISION_FILE, Decision
from service.kinds.evals.gate.models import Candidate
from workers.kinds.cases.run import CaseRun
from workers.kinds.evals.gate.events import candidate_event

POLL_S = 0.5
"""How often a parked case looks for its decision."""


async def _offer(case_run: CaseRun, candidate: Candidate) -> None:
    """With a `remote`, push the candidate to `<remote_branch>-candidates/<its id, 12 digits>` for review as a
    pull request; best effort, as the mirror is: a failed push is logged and the candidate waits anyway."""
    config = case_run.tuning.config
    if config.remote is None:
        return
    branch = f"{config.remote_branch}-candidates/{candidate.version[:12]}"
    try:
        await case_run.tuning.repo.mirror(config.remote, branch, candidate.version)
    except TunefleetError as exc:
        case_run.log.warning(
            "candidate_push_failed", candidate=candidate.version, branch=branch, error=str(exc)
        )
    else:
        case_run.log.info("candidate_pushed", candidate=candidate.version, branch=branch)


async def await_decision(case_run: CaseRun, phase: Phase, attempt: int, candidate: Candidate) -> Decision:
    """The person's decision on `candidate`, waited for with the case's slot lent."""
    path = case_run.store.attempt(phase, attempt).root / DECISION_FILE
    found = read_model(path, Decision)
    if found is None or found.candidate != candidate.version:
        await _offer(case_run, candidate)
        case_run.at("apply", phase, attempt, waiting="approval")
        await candidate_event(
            case_run,
            EventKind.CANDIDATE_AWAITS_APPROVAL,
            phase,
            attempt,
            f"candidate {candidate.version[:12]} waits for approval",
            {"candidate": candidate.version},
        )
        with case_run.runtime.slots.lent(case_run.job_id):
            while found is None or found.candidate != candidate.version:
                await asyncio.sleep(POLL_S)
                found = read_model(path, Decision)
    await candidate_event(
        case_run,
        EventKind.CANDIDATE_DECIDED,
        phase,
        attempt,
        f"candidate {candidate.version[:12]} {found.verdict} by a person ({found.by})"
        + (f": {found.note}" if found.note else ""),
        {"candidate": candidate.version, "verdict": found.verdict, "by": found.by},
    )
    return found
