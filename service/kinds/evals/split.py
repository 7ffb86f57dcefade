"""A tuning's held-out split: drawn when the tuning is registered, kept in its folder, read by whoever
must never tune on a held-out case (the submission) and by the evaluations of a part of the split.

A fraction is drawn once, at the first registration that asks for it: the cases are ordered by a
hash of the seed and their id, and the first `round(fraction * n)` are held out. The draw is then
kept in `holdout.json` (service.core.models.holdout.HeldOut) and never redrawn: a case tuned on never
becomes held out, and a registration that asks for another fraction or seed is refused. Cases the
store already holds (submitted before, so maybe tuned on) are never drawn. A folder of held-out
cases is read at every registration; an id it shares with the tuning's cases is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from service.core.errors import CaseFileError
from service.core.io.files import read_model, write_model
from service.core.models.case import Case
from service.core.models.holdout import HeldOut, HoldoutConfig
from service.core.models.tuning import TuningConfig
from service.core.store import TuningStore
from service.kinds.evals.errors import EvalInputError
from service.kinds.evals.models import CasesSource

HOLDOUT_FILE = "holdout.json"

Part = Literal["holdout", "train", "all"]


def holdout_file(tuning: TuningStore) -> Path:
    return tuning.root / HOLDOUT_FILE


def read_split(tuning: TuningStore) -> HeldOut | None:
    """The tuning's split as drawn, None when it has none."""
    return read_model(holdout_file(tuning), HeldOut)


def held_out_ids(tuning: TuningStore) -> frozenset[str]:
    """The ids of the tuning's held-out cases (none without a split)."""
    split = read_split(tuning)
    return frozenset(split.ids) if split is not None else frozenset()


def load_cases(folder: Path, strict: bool = True) -> list[Case]:
    """Every case file in `folder`, validated: CaseFileError naming the first bad file, or (not
    `strict`: the tuning's own cases, whose bad files the submission refuses by name) without them."""
    from service.kinds.cases.files import case_files, load_case  # YAML: only when reading case files

    cases = []
    for path in case_files(folder):
        try:
            cases.append(load_case(path))
        except CaseFileError:
            if strict:
                raise
    return cases


def _rank(seed: int, case_id: str) -> bytes:
    return hashlib.sha256(f"{seed}:{case_id}".encode()).digest()


def draw(config: TuningConfig, tuning: TuningStore, where: str) -> HeldOut | None:
    """The tuning's split for this registration of `config` (`where`: the tuning file, for errors):
    the kept one, a new draw, or the held-out folder read again; EvalInputError when it cannot be."""
    holdout = config.holdout
    kept = read_split(tuning)
    if holdout is None:
        return None
    train_ids = sorted({case.id for case in load_cases(config.cases, strict=False)})
    stored = {case.case_id for case in tuning.case_revs()}
    if holdout.cases is not None:
        return _folder_split(holdout, train_ids, stored, where)
    if kept is not None:
        if kept.config != holdout:
            raise EvalInputError(
                f"{where}: field 'holdout': the split was drawn with {_describe(kept.config)} when the "
                f"tuning was first registered and cannot change (its train cases were tuned on)"
            )
        return kept
    drawable = [case_id for case_id in train_ids if case_id not in stored]
    assert holdout.fraction is not None  # the model holds one of fraction and cases
    count = round(holdout.fraction * len(train_ids))
    if count == 0 or count > len(drawable) or count == len(train_ids):
        raise EvalInputError(
            f"{where}: field 'holdout.fraction': {holdout.fraction:g} of {len(train_ids)} cases "
            f"({len(drawable)} not yet submitted) makes an empty split: held out {count}, tuned on "
            f"{len(train_ids) - count}; expected at least one case on each side"
        )
    chosen = sorted(sorted(drawable, key=lambda case_id: _rank(holdout.seed, case_id))[:count])
    return HeldOut(config=holdout, ids=chosen, train=[c for c in train_ids if c not in set(chosen)])


def _folder_split(holdout: HoldoutConfig, train_ids: list[str], stored: set[str], where: str) -> HeldOut:
    assert holdout.cases is not None
    try:
        ids = sorted({case.id for case in load_cases(holdout.cases)})
    except CaseFileError as exc:
        raise EvalInputError(f"{where}: field 'holdout.cases': {exc}") from exc
    if not ids:
        raise EvalInputError(
            f"{where}: field 'holdout.cases': folder {holdout.cases} has no case files (*.yaml, *.yml, "
            "*.json): the held-out split is empty"
        )
    taken = sorted(set(ids) & (set(train_ids) | stored))
    if taken:
        raise EvalInputError(
            f"{where}: field 'holdout.cases': case id {taken[0]!r} ({len(taken)} in all) is both held out "
            "and a train case of the tuning; expected held-out ids that the tuning never tunes on"
        )
    return HeldOut(config=holdout, ids=ids, train=train_ids)


def _describe(config: HoldoutConfig) -> str:
    if config.cases is not None:
        return f"cases {config.cases}"
    return f"fraction {config.fraction:g}, seed {config.seed}, repeats {config.repeats}"


def keep_split(tuning: TuningStore, split: HeldOut | None) -> None:
    """Keep the split drawn (nothing to do without one)."""
    if split is not None:
        write_model(holdout_file(tuning), split)


def part_cases(config: TuningConfig, tuning: TuningStore, part: Part) -> list[Case]:
    """The cases of one part of the tuning's split, read from their files now (`all` with no split:
    the tuning's cases). EvalInputError for a part that is empty, or a split the tuning lacks."""
    split = read_split(tuning)
    if part != "all" and split is None:
        raise EvalInputError(
            f"tuning {config.name}: --split {part}: the tuning has no held-out split (add `holdout:` to "
            "its tuning file), so only --split all or --cases DIR can be evaluated"
        )
    held = set(split.ids) if split is not None else set()
    train = [case for case in load_cases(config.cases, strict=False) if case.id not in held]
    heldout: list[Case] = []
    if split is not None:
        source = split.config.cases or config.cases
        folder_split = split.config.cases is not None
        heldout = [case for case in load_cases(source, strict=folder_split) if case.id in held]
    chosen = {"holdout": heldout, "train": train, "all": train + heldout}[part]
    if not chosen:
        what = "has no cases" if part == "all" else f"has an empty {part} split"
        raise EvalInputError(f"tuning {config.name}: --split {part}: the tuning {what}; nothing to evaluate")
    return chosen


def eval_cases(
    tuning: TuningStore, folder: Path | None, split: Part | None
) -> tuple[CasesSource, Path | None, list[Case]]:
    """Where an evaluation's cases come from (a folder, else a part of the split: the held-out cases
    when the tuning has a split, all its cases when not) and the cases, checked: not empty, no id twice."""
    config = tuning.config()
    if folder is not None:
        folder = folder.resolve()
        if not folder.is_dir():
            raise EvalInputError(f"--cases {folder}: expected a folder of case files; there is none")
        chosen = load_cases(folder)
        if not chosen:
            raise EvalInputError(
                f"--cases {folder}: the folder has no case files (*.yaml, *.yml, *.json); nothing to evaluate"
            )
        source: CasesSource = "folder"
    else:
        part: Part = split or ("holdout" if read_split(tuning) is not None else "all")
        chosen = part_cases(config, tuning, part)
        source = part
    seen: set[str] = set()
    for case in chosen:
        if case.id in seen:
            raise EvalInputError(f"case id {case.id!r} is given twice in the cases to evaluate")
        seen.add(case.id)
    return source, folder, chosen
