"""Reading a goal spec (YAML or JSON) with errors that name the file and the field, and resolving it:
relative paths against the file's folder, absent limits from the settings, absent agents from the
goal's tuning (else the demo agents)."""

from __future__ import annotations

import string
from pathlib import Path

import yaml
from pydantic import ValidationError

from service.core.errors import ConfigError
from service.core.io.documents import load_json, load_yaml, one_line
from service.core.models.tuning import CommandAdapter, DemoAdapter, TuningConfig
from service.core.settings import FleetSettings
from service.core.validation import describe_validation
from service.kinds.goals.models import GOAL_PLACEHOLDERS, GoalLimits, GoalSpec


def load_goal_file(path: Path) -> GoalSpec:
    """The validated spec in `path`, its relative paths made absolute."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: expected UTF-8 text; byte {exc.start} is not") from exc
    try:
        data = load_json(text) if path.suffix == ".json" else load_yaml(text)
    except (yaml.YAMLError, ValueError) as exc:  # past a bound too (service.core.io.documents)
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigError(f"{path}: not valid {kind}: {one_line(exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with id and goal")
    try:
        spec = GoalSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, path)) from exc
    base = path.parent.resolve()
    updates: dict[str, object] = {}
    if spec.workspace is not None:
        workspace = base / spec.workspace
        if not workspace.is_dir():
            raise ConfigError(f"{path}: field 'workspace': folder {workspace} does not exist")
        updates["workspace"] = workspace
    for role in ("runner", "analyzer"):
        adapter = getattr(spec, role)
        if isinstance(adapter, CommandAdapter):
            updates[role] = adapter.model_copy(update={"cwd": base / adapter.cwd if adapter.cwd else base})
    return spec.model_copy(update=updates)


def resolve_limits(spec: GoalSpec, settings: FleetSettings) -> GoalLimits:
    """The goal's limits: the spec's, else the settings' defaults; ConfigError if they contradict."""
    given = spec.limits
    limits = GoalLimits(
        min_iterations=given.min_iterations or settings.goal_min_iterations,
        max_iterations=given.max_iterations or settings.goal_max_iterations,
        timeout_s=given.timeout_s or settings.goal_timeout_s,
        iteration_timeout_s=given.iteration_timeout_s or settings.goal_iteration_timeout_s,
        reviewer_timeout_s=given.reviewer_timeout_s or settings.goal_reviewer_timeout_s,
        attempts_per_task=given.attempts_per_task or settings.goal_attempts_per_task,
        max_voids=given.max_voids or settings.goal_max_voids,
    )
    if limits.min_iterations > limits.max_iterations:
        raise ConfigError(
            f"goal {spec.id}: field 'limits.min_iterations' ({limits.min_iterations}) must not exceed "
            f"'limits.max_iterations' ({limits.max_iterations})"
        )
    return limits


def resolve_agents(spec: GoalSpec, tuning: TuningConfig | None) -> GoalSpec:
    """The spec with its runner and analyzer filled in (the tuning's, else demo), each checked for the
    placeholders a goal step gives."""
    runner = spec.runner or (tuning.runner if tuning else DemoAdapter())
    analyzer = spec.analyzer or (tuning.analyzer if tuning else DemoAdapter())
    for role, adapter in (("runner", runner), ("analyzer", analyzer)):
        if not isinstance(adapter, CommandAdapter):
            continue
        known = GOAL_PLACEHOLDERS[role]
        for index, element in enumerate(adapter.argv):
            try:
                names = {f for _, f, _, _ in string.Formatter().parse(element) if f is not None}
            except ValueError as exc:
                raise ConfigError(f"goal {spec.id}: {role}.argv[{index}]: {exc}") from exc
            unknown = sorted(names - known)
            if unknown:
                raise ConfigError(
                    f"goal {spec.id}: {role}.argv[{index}]: the goal steps give no placeholder "
                    f"{{{unknown[0]}}}; known: {', '.join(sorted(known))} (give the goal its own "
                    f"'{role}' in its spec)"
                )
    return spec.model_copy(update={"runner": runner, "analyzer": analyzer})
