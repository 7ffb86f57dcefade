"""An evaluation's folder in the store.

<store>/evals/<eval>/
    EVAL.json                    the spec (service.kinds.evals.models.EvalSpec), written once at creation
    RESULTS.json                 the results, kept once every item has its outcome
    (service.kinds.evals.results)
    cases/<case>.json            each case as evaluated (the rev the spec names)
    items/<case>/<k>/            repeat k of the case: run.json, feedback.json, analysis.md (the
                                 fleet's sealed records, as in a try), notes.jsonl (its grade),
                                 spent.jsonl, the per-lease folders run-<token>/ and analyze-<token>/,
                                 and item.json, the outcome, written last and once
    items/<case>/<k>.void-<n>/   a void try of the item, set aside as in a case's attempt

Only the worker holding an item's lease writes in its folder (every write is fenced by the caller).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from service.core.errors import StoreError
from service.core.io.files import read_model, write_model
from service.core.models.case import Case
from service.core.models.records import Phase
from service.core.runs import RunFolder, RunsFolder
from service.core.store import AttemptPaths, CaseStore
from service.kinds.evals.errors import UnknownEvalError
from service.kinds.evals.models import EvalSpec, ItemResult

SPEC_FILE = "EVAL.json"
RESULTS_FILE = "RESULTS.json"
ITEM_FILE = "item.json"


class ItemStore(CaseStore):
    """One item's folder: one try of its case, whose records (run.json, feedback.json) are those of a
    case's attempt (service.core.store.AttemptPaths) kept in the item's own folder, and once the item
    ended, its outcome. So the loop's run and analyze steps take an item for a case with one try (its
    phase and attempt name that one try: an item has no other)."""

    def __init__(self, root: Path, case_id: str, rev: int, repeat: int) -> None:
        super().__init__(root, case_id, rev)
        self.repeat = repeat
        self.paths = AttemptPaths(root)
        self.outcome_file = root / ITEM_FILE

    def attempt(self, phase: Phase, attempt: int) -> AttemptPaths:
        return self.paths

    def attempts(self) -> Iterator[tuple[Phase, int, AttemptPaths]]:
        """The item's one try, once it has a run."""
        if self.paths.run.exists():
            yield "nomem", self.repeat, self.paths

    def try_folders(self) -> Iterator[Path]:
        """The item's try and its void tries set aside."""
        if self.root.is_dir():
            yield self.root
        yield from self.voids()

    def outcome(self) -> ItemResult | None:
        return read_model(self.outcome_file, ItemResult)

    def write_outcome(self, result: ItemResult) -> None:
        write_model(self.outcome_file, result)

    def voids(self, phase: Phase = "nomem", attempt: int = 1) -> list[Path]:
        """The item's void tries set aside (`<k>.void-<n>`), oldest first."""
        prefix = f"{self.root.name}.void-"
        try:
            names = os.listdir(self.root.parent)
        except FileNotFoundError:
            return []
        found = [n for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()]
        return [self.root.parent / n for n in sorted(found, key=lambda n: int(n[len(prefix) :]))]

    def set_aside(self, phase: Phase = "nomem", attempt: int = 1) -> Path:
        """Move a void try aside as `<k>.void-<n>` and return where it went."""
        taken = self.voids()
        n = int(taken[-1].name.rsplit("-", 1)[-1]) + 1 if taken else 1
        target = self.root.with_name(f"{self.root.name}.void-{n}")
        self.root.rename(target)
        return target


class EvalStore(RunFolder[EvalSpec], spec_file=SPEC_FILE, spec=EvalSpec):
    """One evaluation's folder."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.results_file = root / RESULTS_FILE
        self.cases_dir = root / "cases"
        self.items_dir = root / "items"

    def missing_spec(self) -> UnknownEvalError:
        return self.unknown()

    def unknown(self) -> UnknownEvalError:
        return UnknownEvalError(f"no evaluation {self.run_id!r} in the store {self.root.parent.parent}")

    def case(self, case_id: str) -> Case:
        """The case as the evaluation keeps it; StoreError naming the file when it is missing or bad."""
        path = self.cases_dir / f"{case_id}.json"
        case = read_model(path, Case)
        if case is None:
            raise StoreError(f"{path}: the evaluation's copy of case {case_id!r} is missing")
        return case

    def write_case(self, case: Case) -> None:
        write_model(self.cases_dir / f"{case.id}.json", case)

    def item(self, case_id: str, rev: int, repeat: int) -> ItemStore:
        return ItemStore(self.items_dir / case_id / str(repeat), case_id, rev, repeat)

    def scan(self) -> ItemScan:
        """Every item's outcome, by (case, repeat), and the void tries set aside, in one walk of the
        items' folders (plain strings, no Path objects: an evaluation may hold tens of thousands of
        items); an unreadable outcome is left out (its item runs again)."""
        scan = ItemScan()
        items = str(self.items_dir)
        try:
            cases = os.listdir(items)
        except FileNotFoundError:
            return scan
        scan.started = True
        for case_id in cases:
            folder = f"{items}/{case_id}"
            for name in os.listdir(folder):
                if not name.isdigit():
                    scan.voids += ".void-" in name
                    continue
                try:
                    with open(f"{folder}/{name}/{ITEM_FILE}", "rb") as file:
                        raw = file.read()
                except (FileNotFoundError, NotADirectoryError):
                    continue
                try:
                    scan.outcomes[(case_id, int(name))] = ItemResult.model_validate_json(raw)
                except ValueError:
                    continue
        return scan


@dataclass
class ItemScan:
    """What an evaluation's items' folders hold now."""

    outcomes: dict[tuple[str, int], ItemResult] = field(default_factory=dict)
    voids: int = 0
    started: bool = False
    """Whether any item has a folder yet."""


class EvalsStore(RunsFolder[EvalStore]):
    """The `evals/` folder of the store."""

    noun = "evaluation"

    def run(self, run_id: str) -> EvalStore:
        return EvalStore(self.root / run_id)

    eval = run
