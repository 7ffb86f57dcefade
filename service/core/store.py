"""The store: a folder every process of the fleet mounts, and the source of truth for progress.

<store>/tunings/<tuning>/
    tuning.json                  the registered config (absolute paths)
    system.git/                  the system repository (bare); see service.core.system
    snapshots/<version>/         read-only trees of system versions
    events.jsonl                 every event of the tuning
    memories/<case>/r<rev>/      memories kept by the memory store
    cases/<case>/r<rev>/
        case.json  result.json  notes.jsonl  failed-<n>.json
        cancel.json              a cancel given while a worker held the case (outlives Redis)
        void-baseline.json       voids already counted when the case last ended failed
        sandbox-trips.json       sandbox-down reports of a runner with nothing to probe
        handbacks.jsonl          the case's hand-backs for an LLM provider outage, one `Handback` a line
        <phase>/<attempt>/       run.json feedback.json analysis.md apply.json (the fleet's records,
                                 sealed), and the per-lease step folders run-<token>/
                                 analyze-<token>/ apply-<token>/ (workers.adapters.folder)
        <phase>/<attempt>.void-<n>/   a void try, set aside
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from service.core.errors import InvalidIdError, UnknownTuningError
from service.core.io.files import append_line, read_model, require_model, write_model
from service.core.models.case import Case, is_slug
from service.core.models.records import CancelRequest, CaseResult, Handback, Note, Phase
from service.core.models.tuning import TuningConfig

PHASES: tuple[Phase, ...] = ("nomem", "mem")


class AttemptPaths:
    """The records of one attempt's folder. The agents' own files (input, memory, workspace, logs)
    live in the per-lease work folders beside them: `run-<token>/`, `analyze-<token>/`, `apply-<token>/`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run = root / "run.json"
        self.feedback = root / "feedback.json"
        self.analysis = root / "analysis.md"
        self.apply = root / "apply.json"


class _InFolder:
    """A file of a case's folder, by name: its path is made when first asked for, then kept (a walk of
    the store makes a CaseStore per case and asks for one or two of them)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.attr = name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, store: CaseStore, owner: type | None = None) -> Path:
        path = store.root / self.name
        store.__dict__[self.attr] = path  # found before this descriptor from now on
        return path


class CaseStore:
    """One case revision's folder."""

    def __init__(self, root: Path, case_id: str, rev: int) -> None:
        self.root = root
        self.case_id = case_id
        self.rev = rev
        self._attempts: dict[tuple[Phase, int], AttemptPaths] = {}

    case_file = _InFolder("case.json")
    result_file = _InFolder("result.json")
    notes_file = _InFolder("notes.jsonl")
    voids_file = _InFolder("void-baseline.json")
    cancel_file = _InFolder("cancel.json")
    handbacks_file = _InFolder("handbacks.jsonl")

    def attempt(self, phase: Phase, attempt: int) -> AttemptPaths:
        """The attempt's paths (made once per store object: a step asks for them several times)."""
        paths = self._attempts.get((phase, attempt))
        if paths is None:
            paths = self._attempts[(phase, attempt)] = AttemptPaths(self.root / phase / str(attempt))
        return paths

    def load_case(self) -> Case | None:
        return read_model(self.case_file, Case)

    def write_case(self, case: Case) -> None:
        write_model(self.case_file, case)

    def result(self) -> CaseResult | None:
        return read_model(self.result_file, CaseResult)

    def write_result(self, result: CaseResult) -> None:
        write_model(self.result_file, result)

    def request_cancel(self, request: CancelRequest) -> None:
        """Keep a cancel for the worker that holds the case (or the next to take it, after Redis lost it)."""
        write_model(self.cancel_file, request)

    def cancel_requested(self) -> bool:
        return self.cancel_file.exists()

    def add_note(self, note: Note) -> None:
        append_line(self.notes_file, note.model_dump_json())

    def has_note(self, kind: str, seal: str) -> bool:
        """Whether a note of `kind` for the record sealed `seal` is among the notes (a line that does not
        read as a note is passed over: the file is only ever appended to)."""
        if not self.notes_file.exists():
            return False
        for line in self.notes_file.read_text(encoding="utf-8").splitlines():
            if seal in line and kind in line:
                with contextlib.suppress(ValueError):
                    note = Note.model_validate_json(line)
                    if note.kind == kind and note.seal == seal:
                        return True
        return False

    def add_handback(self, handback: Handback) -> None:
        append_line(self.handbacks_file, handback.model_dump_json())

    def handbacks(self) -> list[Handback]:
        """The case's hand-backs for a provider outage (a line that does not read as one is passed over)."""
        try:
            lines = self.handbacks_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            with contextlib.suppress(ValueError):
                found.append(Handback.model_validate_json(line))
        return found

    def voids(self, phase: Phase, attempt: int) -> list[Path]:
        """The attempt's void folders, oldest first."""
        base = self.attempt(phase, attempt).root
        found = [p for p in base.parent.glob(f"{base.name}.void-*") if p.name.rsplit("-", 1)[-1].isdigit()]
        return sorted(found, key=lambda p: int(p.name.rsplit("-", 1)[-1]))

    def set_aside(self, phase: Phase, attempt: int) -> Path:
        """Move a void attempt aside as `<attempt>.void-<n>` and return where it went."""
        base = self.attempt(phase, attempt).root
        taken = self.voids(phase, attempt)
        n = int(taken[-1].name.rsplit("-", 1)[-1]) + 1 if taken else 1
        target = base.parent / f"{base.name}.void-{n}"
        base.rename(target)
        return target

    def archive_failure(self) -> Path | None:
        """Keep a `failed` result as `failed-<n>.json` so the case can run again."""
        if not self.result_file.exists():
            return None
        n = 1 + sum(1 for _ in self.root.glob("failed-*.json"))
        target = self.root / f"failed-{n}.json"
        self.result_file.rename(target)
        return target

    def try_folders(self) -> Iterator[Path]:
        """Every try's folder, void ones set aside included (what the case's spend counts)."""
        for phase in PHASES:
            folder = self.root / phase
            if folder.is_dir():
                yield from (p for p in folder.iterdir() if p.is_dir())

    def attempts(self) -> Iterator[tuple[Phase, int, AttemptPaths]]:
        """Every recorded attempt, in loop order (voids excluded)."""
        for phase in PHASES:
            folder = self.root / phase
            if not folder.is_dir():
                continue
            numbers = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
            for number in numbers:
                yield phase, number, self.attempt(phase, number)


class TuningStore:
    """One tuning's folder."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.root = root
        self.config_file = root / "tuning.json"
        self.repo = root / "system.git"
        self.snapshots = root / "snapshots"
        self.events_file = root / "events.jsonl"
        self.memories = root / "memories"
        self.cases_dir = root / "cases"

    def exists(self) -> bool:
        return self.config_file.exists()

    def config(self) -> TuningConfig:
        return require_model(self.config_file, TuningConfig, self._unregistered)

    def _unregistered(self) -> UnknownTuningError:
        return UnknownTuningError(f"tuning {self.name!r} is not registered in {self.root.parent}")

    def write_config(self, config: TuningConfig) -> None:
        write_model(self.config_file, config)

    def case(self, case_id: str, rev: int) -> CaseStore:
        return CaseStore(self.cases_dir.joinpath(case_id, f"r{rev}"), case_id, rev)

    def case_revs(self) -> Iterator[CaseStore]:
        """Every case revision held, by case id then rev (one `scandir` per folder: a store of 100,000
        cases is walked in seconds, not tens of them)."""
        for case_id in sorted(_folder_names(self.cases_dir)):
            for rev in self.revs(case_id):
                yield self.case(case_id, rev)

    def latest_revs(self) -> Iterator[CaseStore]:
        """The newest revision of every case, by case id. One case is held at a time: a walk that kept
        every case's object until its end made the daemon's memory peak (and so its RSS, which the
        allocator keeps) grow by about 1 KB per case in the store (bench soak)."""
        for case_id in sorted(_folder_names(self.cases_dir)):
            newest = self.newest(case_id)
            if newest is not None:
                yield newest

    def newest(self, case_id: str) -> CaseStore | None:
        """The case's newest revision (None for a case the tuning does not have): one folder read."""
        revs = self.revs(case_id)
        return self.case(case_id, revs[-1]) if revs else None

    def revs(self, case_id: str) -> list[int]:
        """The case's revisions held, in order (none for a case the tuning does not have)."""
        in_case = _folder_names(os.path.join(self.cases_dir, case_id))
        return sorted(int(name[1:]) for name in in_case if _is_rev(name))

    def unfinished(self, case_id: str | None = None) -> list[CaseStore]:
        """The newest revisions with no result yet (of the case `case_id` only, when given: one folder
        read). Without `case_id`, a walk of every case folder (0.5 s for 20,000 cases here): a process
        that serves others on its event loop (the daemon, its API) runs it in a thread."""
        if case_id is None:
            newest: Iterable[CaseStore] = self.latest_revs()
        else:
            one = self.newest(case_id)
            newest = [] if one is None else [one]
        return [case for case in newest if not case.result_file.exists()]

    def append_events(self, lines: list[str]) -> None:
        """Several events' lines in one write (O_APPEND: never interleaved with other writers' lines)."""
        append_line(self.events_file, "\n".join(line.rstrip("\n") for line in lines))

    def submit_memory(self, case_id: str, rev: int, source: Path) -> Path:
        """Keep the memory a passing run started from and passed with."""
        target = self.memories / case_id / f"r{rev}"
        staging = target.with_name(target.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        if source.is_dir():
            shutil.copytree(source, staging, symlinks=True, copy_function=shutil.copyfile)
        else:  # the run wrote no memory
            staging.mkdir(parents=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target


class Store:
    """The whole store folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def tuning(self, name: str) -> TuningStore:
        """The tuning's folder, whether or not it exists; InvalidIdError for a name that is not a slug."""
        if not is_slug(name):
            raise InvalidIdError("tuning", name)
        return TuningStore(self.root / "tunings" / name, name)

    def known_tuning(self, name: str) -> TuningStore:
        """The tuning's folder; UnknownTuningError naming the registered ones when it is not one."""
        tuning = self.tuning(name)
        if not tuning.exists():
            known = ", ".join(self.tuning_names()) or "none"
            raise UnknownTuningError(f"tuning {name!r} is not registered (known: {known})")
        return tuning

    def tuning_names(self) -> list[str]:
        folder = self.root / "tunings"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if is_slug(p.name) and (p / "tuning.json").exists())


def _folder_names(folder: Path | str) -> list[str]:
    """The names of the folders in `folder` (none when it is missing or not a folder)."""
    try:
        with os.scandir(folder) as entries:
            return [entry.name for entry in entries if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_rev(name: str) -> bool:
    return name.startswith("r") and name[1:].isdigit()
