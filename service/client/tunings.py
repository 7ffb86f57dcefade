"""Reading a tuning file and registering the tuning in the store."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from service.core.errors import ConfigError
from service.core.models.tuning import CommandAdapter, DemoAdapter, TuningConfig
from service.core.store import TuningStore
from service.core.system import SystemRepo
from service.core.validation import describe_validation
from service.evals.split import draw, keep_split
from service.gate.config import GateConfig


def load_tuning_file(path: Path) -> TuningConfig:
    """The tuning in `path`, relative paths resolved against the file's folder."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with name, system and cases")
    base = path.parent.resolve()
    _resolve_prompts(data, base)
    try:
        config = TuningConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, path)) from exc
    updates: dict[str, object] = {"system": base / config.system, "cases": base / config.cases}
    if config.holdout is not None and config.holdout.cases is not None:
        updates["holdout"] = config.holdout.model_copy(update={"cases": base / config.holdout.cases})
    if config.gate is not None and config.gate.folder is not None:
        updates["gate"] = _gate_folder(config.gate, base, path)
    for role in ("runner", "analyzer", "applier"):
        adapter = getattr(config, role)
        if isinstance(adapter, DemoAdapter) and adapter.outage_file is not None:
            updates[role] = adapter.model_copy(update={"outage_file": base / adapter.outage_file})
        elif isinstance(adapter, CommandAdapter) and adapter.cwd is not None:
            updates[role] = adapter.model_copy(update={"cwd": base / adapter.cwd})
        elif isinstance(adapter, CommandAdapter):
            updates[role] = adapter.model_copy(update={"cwd": base})
    if not Path(str(updates["system"])).is_dir():
        raise ConfigError(f"{path}: field 'system': folder {updates['system']} does not exist")
    return config.model_copy(update=updates)


def _gate_folder(gate: GateConfig, base: Path, path: Path) -> GateConfig:
    """The gate with its regression folder made absolute; ConfigError when there is no such folder."""
    folder = base / gate.folder if gate.folder is not None else None
    if folder is None or not folder.is_dir():
        raise ConfigError(f"{path}: field 'gate.folder': folder {folder} does not exist")
    return gate.model_copy(update={"folder": folder})


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
