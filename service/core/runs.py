"""Durable runs in the store: a kind of run (a goal, an evaluation) keeps each run in a folder of its
own, named by the run's id, under one folder of the store (`<store>/goals/`, `<store>/evals/`). A run
exists once its spec file is written (the spec is written last at creation, so a half-made run is no
run); the spec is the run's input, written once.

`RunFolder` is one run's folder with its spec; `RunsFolder` is the kind's folder, which finds runs by id
and lists them. A kind subclasses both and adds its own files (state, results, items).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from service.core.errors import InvalidIdError
from service.core.io.files import require_model, write_model
from service.core.models.case import is_slug

SpecT = TypeVar("SpecT", bound=BaseModel)
RunT = TypeVar("RunT", bound="RunFolder[Any]")


class RunFolder(ABC, Generic[SpecT]):
    """One run's folder: its spec and whatever the kind adds. A kind names its spec's file and model
    where it subclasses: `class GoalStore(RunFolder[GoalSpec], spec_file="GOAL_SPEC.json", spec=GoalSpec)`."""

    SPEC_FILE: ClassVar[str]
    spec_model: type[SpecT]

    def __init_subclass__(cls, spec_file: str = "", spec: type[Any] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if spec_file:
            cls.SPEC_FILE = spec_file
        if spec is not None:
            cls.spec_model = spec

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec_file = root / self.SPEC_FILE

    @property
    def run_id(self) -> str:
        return self.root.name

    def exists(self) -> bool:
        return self.spec_file.is_file()

    def spec(self) -> SpecT:
        """The spec; `missing_spec()` when it was never written, StoreError naming the file if invalid."""
        return require_model(self.spec_file, self.spec_model, self.missing_spec)

    def write_spec(self, spec: SpecT) -> None:
        write_model(self.spec_file, spec)

    @abstractmethod
    def missing_spec(self) -> Exception:
        """The error for a run without a spec (the kind names it)."""

    @abstractmethod
    def unknown(self) -> Exception:
        """The error for a run id the store does not hold (the kind names it)."""


class RunsFolder(ABC, Generic[RunT]):
    """A kind's folder of runs (`<store>/<kind>/`), one sub-folder per run id."""

    noun: ClassVar[str] = "run"
    """The kind's word for a run in errors (`goal`, `evaluation`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @abstractmethod
    def run(self, run_id: str) -> RunT:
        """The run's folder, whether or not it exists."""

    def known(self, run_id: str) -> RunT:
        """The run's folder; its `unknown()` error when the store holds no such run, InvalidIdError for an
        id that is not a slug (every front end's ids come this way: none names a path outside)."""
        if not is_slug(run_id):
            raise InvalidIdError(self.noun, run_id)
        found = self.run(run_id)
        if not found.exists():
            raise found.unknown()
        return found

    def all(self) -> Iterator[RunT]:
        """Every run with a spec, by id."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return
        for name in names:
            found = self.run(name)
            if found.exists():
                yield found
