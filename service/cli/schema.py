"""The JSON Schemas of every file and payload at a boundary (`tunefleet schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

from service.core.models.case import Case, RunTask
from service.core.models.events import EVENTS
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
from service.kinds.goals.models import GoalSpec
from service.kinds.goals.state import GoalState, ProgressEntry, Review, WorkerResult

SCHEMAS: dict[str, type[BaseModel] | TypeAdapter[Any]] = {
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
    "event": EVENTS,  # one union of every kind's event class (service.core.models.events)
    "case-job": CaseJob,
    "goal": GoalSpec,
    "goal-state": GoalState,
    "review": Review,
    "worker-result": WorkerResult,
    "progress-entry": ProgressEntry,
}


def schemas(names: list[str] | None = None) -> dict[str, Any]:
    chosen = names or list(SCHEMAS)
    return {name: _schema(SCHEMAS[name]) for name in chosen}


def _schema(model: type[BaseModel] | TypeAdapter[Any]) -> dict[str, Any]:
    return model.json_schema() if isinstance(model, TypeAdapter) else model.model_json_schema()
