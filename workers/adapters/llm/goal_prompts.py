"""The goal steps' prompt templates (`prompts/plan.md`, `prompts/work.md`, `prompts/review.md`) and the
values that fill them, taken from a GoalStepRequest.

The templates are `string.Template`s as the case steps' (workers.adapters.llm.prompts); only the
built-in ones are used (a tuning's `prompts` names the case steps' only). Every input file is quoted
up to INPUT_BYTES_MAX, the workspace as the analyzer sees a run's, the system's text files whole up to
SYSTEM_BYTES_MAX.
"""

from __future__ import annotations

import json
import string
from importlib import resources
from pathlib import Path

from service.core.errors import ConfigError
from service.kinds.goals.models import GoalStep
from workers.adapters.goal_base import GoalStepRequest
from workers.adapters.llm.prompts import tree_view, workspace_view

COMMON_NAMES = frozenset(
    {"goal", "acceptance", "iteration", "min_iterations", "max_iterations", "earlier", "workspace", "system"}
)
GOAL_NAMES: dict[GoalStep, frozenset[str]] = {
    "plan": COMMON_NAMES | {"remaining_work"},
    "work": COMMON_NAMES | {"todo", "attempts_per_task", "schema"},
    "review": COMMON_NAMES | {"todo", "progress", "worker_result", "changes", "schema"},
}
"""The placeholders each goal step's template may use."""
INPUT_BYTES_MAX = 50_000
"""Bytes quoted of each input file (TODO, progress log, worker result, changes)."""


def load_goal_template(step: GoalStep) -> string.Template:
    """The built-in template of a goal step, checked for unknown placeholders (ConfigError)."""
    package = __package__ or "workers.adapters.llm"
    text = resources.files(package).joinpath(f"prompts/{step}.md").read_text()
    template = string.Template(text)
    unknown = sorted(set(template.get_identifiers()) - GOAL_NAMES[step])
    if not template.is_valid() or unknown:
        raise ConfigError(f"the built-in {step} prompt names an unknown placeholder: {unknown}")
    return template


def quoted(path: Path | None, missing: str) -> str:
    """An input file's text, cut at INPUT_BYTES_MAX (and said so); `missing` when there is none."""
    if path is None:
        return missing
    try:
        with path.open("rb") as handle:
            head = handle.read(INPUT_BYTES_MAX + 1)
    except OSError:
        return missing
    if not head.strip():
        return missing
    text = head[:INPUT_BYTES_MAX].decode("utf-8", errors="replace")
    if len(head) > INPUT_BYTES_MAX:
        text += f"\n… (cut at {INPUT_BYTES_MAX} bytes)"
    return text


def _earlier(entries: list[dict[str, object]]) -> str:
    if not entries:
        return "(none: this is the first iteration)"
    lines = []
    for entry in entries:
        rest = {k: v for k, v in entry.items() if k != "iteration"}
        lines.append(f"- iteration {entry.get('iteration')}: {json.dumps(rest)}")
    return "\n".join(lines)


def _items(values: list[str], none: str) -> str:
    return "\n".join(f"- {value}" for value in values) or none


def goal_values(request: GoalStepRequest, schema: str) -> dict[str, str]:
    """Every value a goal step's template may name (each template uses its own)."""
    brief, inputs = request.brief, request.inputs
    return {
        "goal": brief.goal,
        "acceptance": _items(brief.acceptance, "(none given: judge by the goal itself)"),
        "iteration": str(brief.iteration),
        "min_iterations": str(brief.min_iterations),
        "max_iterations": str(brief.max_iterations),
        "attempts_per_task": str(brief.attempts_per_task),
        "earlier": _earlier(brief.earlier),
        "remaining_work": _items(brief.remaining_work, "(none: plan from the goal)"),
        "workspace": workspace_view(request.workspace_dir),
        "system": tree_view(request.system_dir) if request.system_dir.is_dir() else "(no files)",
        "todo": quoted(inputs.get("todo"), "(no TODO)"),
        "progress": quoted(inputs.get("progress"), "(the worker logged no progress)"),
        "worker_result": quoted(inputs.get("worker_result"), "(the worker reported no result)"),
        "changes": quoted(inputs.get("changes"), "(no change to the workspace)"),
        "schema": schema,
    }
