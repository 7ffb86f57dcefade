"""The JSON Schemas of every file and payload at a boundary (`tunefleet schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from service.core.models.case import Case, RunTask
from service.core.models.events import Event
from service.core.models.goal import GoalSpec
from service.core.models.goal_state import GoalState, ProgressEntry, Review, WorkerResult
from service.core.models.jobs import CaseJob
from service.core.models.records import (
    ApplyOutput,
    ApplyRecord,
    CaseResult,
    Feedback,
    Note,
    RunOutput,
    RunRecord,
)
from service.core.models.tuning import TuningConfig

SCHEMAS: dict[str, type[BaseModel]] = {
    "case": Case,
    "run-task": RunTask,
    "tuning": TuningConfig,
    "run-output": RunOutput,
    "run-record": RunRecord,
    "feedback": Feedback,
    "apply-output": ApplyOutput,
    "apply-record": ApplyRecord,
    "case-result": CaseResult,
    "note": Note,
    "event": Event,
    "case-job": CaseJob,
    "goal": GoalSpec,
    "goal-state": GoalState,
    "review": Review,
    "worker-result": WorkerResult,
    "progress-entry": ProgressEntry,
}


def schemas(names: list[str] | None = None) -> dict[str, Any]:
    chosen = names or list(SCHEMAS)
    return {name: SCHEMAS[name].model_json_schema() for name in chosen}
