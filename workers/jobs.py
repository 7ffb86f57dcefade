"""The kinds of leased job a worker runs (workers.envelope): a kind is added here, with its models and
its body, and nowhere else."""

from __future__ import annotations

from typing import Any

from workers.case_job import CaseKind
from workers.envelope import JobKind
from workers.evals.kind import EvalItemKind
from workers.goals.job import GoalKind

JOB_KINDS: tuple[JobKind[Any, Any], ...] = (CaseKind(), GoalKind(), EvalItemKind())
