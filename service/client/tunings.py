"""Reading a tuning file and registering the tuning in the store."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from service.core.errors import ConfigError
from service.core.io.documents import load_yaml
from service.core.models.tuning import (
    PLACEHOLDERS,
    CommandAdapter,
    DemoAdapter,
    LlmAdapter,
    TuningConfig,
    argv_problems,
    missing_placeholders,
)
from service.core.store import TuningStore
from service.core.system import SystemRepo
from service.core.validation import WHOLE_FILE, Problem, join_problems, plain_problems
from service.kinds.evals.split import draw, keep_split


def load_tuning_file(path: Path) -> TuningConfig:
    """The tuning in `path`, relative paths resolved against the file's folder; ConfigError naming the
    file and every problem found in it (service.client.check words them)."""
    config, problems = read_tuning_file(path)
    if config is None or problems:
        raise ConfigError(f"{path}: {join_problems(problems)}")
    return config


def read_tuning_file(path: Path) -> tuple[TuningConfig | None, list[Problem]]:
    """The tuning in `path` (None when it cannot be read or validated) and every problem of it: the
    file's, each field's in plain words, each folder it names that does not exist, and each role's
    argv that does not name where the role writes."""
    data, problem = _read_yaml(path)
    if data is None:
        return None, [problem] if problem is not None else []
    base = path.parent.resolve()
    _resolve_prompts(data, base)
    folders = _folder_problems(data, base)
    try:
        config = TuningConfig.model_validate(data)
    except ValidationError as exc:
        return None, _with_raw_argv(plain_problems(exc, TuningConfig, data), data) + folders
    updates: dict[str, object] = {"system": base / config.system, "cases": base / config.cases}
    if config.holdout is not None and config.holdout.cases is not None:
        updates["holdout"] = config.holdout.model_copy(update={"cases": base / config.holdout.cases})
    if config.gate is not None and config.gate.folder is not None:
        updates["gate"] = config.gate.model_copy(update={"folder": base / config.gate.folder})
    problems = folders
    for role in ("runner", "analyzer", "applier"):
        adapter = getattr(config, role)
        if isinstance(adapter, DemoAdapter) and adapter.outage_file is not None:
            updates[role] = adapter.model_copy(update={"outage_file": base / adapter.outage_file})
        elif isinstance(adapter, CommandAdapter):
            updates[role] = adapter.model_copy(update={"cwd": base / (adapter.cwd or ".")})
    problems += unwritten("runner", config.runner)
    return config.model_copy(update=updates), problems


def unwritten(role: str, adapter: object) -> list[Problem]:
    """A problem for each placeholder `role`'s argv must name and does not (REQUIRED): where the role
    writes what the fleet reads. The runner's is refused at load (every run would be void: three void runs
    per case, then `failed`); `tunefleet check` warns of the others."""
    return [
        Problem(f"{role}.argv", f"names no {{{name}}}: {WRITES[name].format(role=role)}")
        for name in missing_placeholders(role, adapter)
    ]


WRITES = {
    "output": "the file the {role} must write; without it the fleet finds no output "
    '(add "--output", "{{output}}" or the like)',
    "feedback": "where the analyzer writes its grade; without it every case fails",
    "worktree": "the copy of the instructions the applier edits; without it no edit is ever made",
}


FOLDERS = (("system",), ("cases",), ("holdout", "cases"), ("gate", "folder"))
"""The folders a tuning file names (by their keys), relative to the file's own folder."""


def _folder_problems(data: dict[str, object], base: Path) -> list[Problem]:
    """A problem for each folder the file names that does not exist, named by its field (`cases`), read
    from what the file says: a file with other mistakes has its folders checked too."""
    problems = []
    for keys in FOLDERS:
        given: object = data
        for key in keys:
            given = given.get(key) if isinstance(given, dict) else None
        if not isinstance(given, str) or not given:
            continue
        folder = base / given
        if not folder.is_dir():
            field = ".".join(keys)
            relative = (
                "" if Path(given).is_absolute() else f" ({field}: {given}, from the tuning file's folder)"
            )
            what = "is a file, not a folder" if folder.exists() else "does not exist"
            problems.append(Problem(field, f"folder {folder} {what}{relative}"))
    return problems


def prompt_files(config: TuningConfig) -> list[tuple[str, str, Path]]:
    """Each llm adapter's own prompt templates: (role, step, file)."""
    found: list[tuple[str, str, Path]] = []
    for role in ("runner", "analyzer", "applier"):
        adapter = getattr(config, role)
        if isinstance(adapter, LlmAdapter):
            found += [(role, step, prompt) for step, prompt in adapter.prompts.items()]
    return found


def _with_raw_argv(problems: list[Problem], data: dict[str, object]) -> list[Problem]:
    """Add the argv problems of each role that validated on its own: pydantic checks the placeholders
    only once the whole file is valid, and a file with a typo elsewhere has its argv checked all the same."""
    seen = set(problems)
    for role in PLACEHOLDERS:
        raw = data.get(role)
        if not isinstance(raw, dict) or raw.get("kind") != "command":
            continue
        argv = raw.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            continue
        for field, text in argv_problems(role, CommandAdapter.model_construct(argv=argv)):
            if Problem(field, text) not in seen:
                problems.append(Problem(field, text))
    return problems


def _read_yaml(path: Path) -> tuple[dict[str, object] | None, Problem | None]:
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))  # aliases' expansion bounded
    except FileNotFoundError:
        return None, Problem(WHOLE_FILE, "no such file")
    except (OSError, UnicodeDecodeError) as exc:
        return None, Problem(WHOLE_FILE, f"cannot be read: {exc}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        return None, Problem(WHOLE_FILE, f"not valid YAML{where}: {' '.join(str(what).split())}")
    if not isinstance(data, dict):
        return None, Problem(WHOLE_FILE, "expected a mapping with name, system and cases")
    return data, None


def _resolve_prompts(data: dict[str, object], base: Path) -> None:
    """An llm adapter's own prompt templates, given relative to the tuning file, made absolute (before
    validation: the model takes absolute paths only, so that no worker reads them from its own cwd)."""
    for role in ("runner", "analyzer", "applier"):
        adapter = data.get(role)
        if not isinstance(adapter, dict) or adapter.get("kind") != "llm":
            continue
        prompts = adapter.get("prompts")
        if isinstance(prompts, dict):
            adapter["prompts"] = {
                step: str(base / value) if isinstance(value, str) else value
                for step, value in prompts.items()
            }


async def register(store: TuningStore, config: TuningConfig, where: str | None = None) -> str:
    """Write the tuning's config into the store and import its system (once); the first version. Its
    held-out split is drawn (or checked) first: a split that cannot be drawn registers nothing
    (`where`: the tuning file, for the error)."""
    split = draw(config, store, where or config.name)
    store.root.mkdir(parents=True, exist_ok=True)
    keep_split(store, split)
    store.write_config(config)
    repo = SystemRepo(store.repo, store.snapshots)
    return await repo.init_from(config.system)
