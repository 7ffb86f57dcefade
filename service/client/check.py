"""`tunefleet check`: a tuning file and its cases checked with no Redis, no daemon and no store.

Every problem is found in one pass and said as `file: field 'x': what is wrong`, in the words of
service.core.validation. Errors are what the daemon would refuse (the tuning) or submit would refuse (a
case); warnings are what would load but cost runs for nothing: an analyzer or applier argv that does not
name where it writes, an agent script that is not there, a held-out split too small for any comparison
of two versions to be beyond chance, and evaluations of the cases tuned on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, NamedTuple

from service.client.tunings import prompt_files, read_tuning_file, unwritten
from service.core.models.case import Case
from service.core.models.tuning import CommandAdapter, TuningConfig
from service.core.validation import Problem
from service.kinds.cases.files import case_files, read_case
from service.kinds.evals.stats import mcnemar_exact

Level = Literal["error", "warning"]

SCRIPT_SUFFIXES = (".py", ".sh", ".js", ".mjs", ".ts", ".rb", ".pl")
"""An argv element ending so names a script, looked for in the agent's working directory."""

SIGNIFICANCE = 0.05
GAIN_SHOWN = 0.2
"""The gain (in pass rate) the held-out warning says how many cases it takes to tell."""
ADVISE_HOLDOUT_FROM = 10
"""With this many cases or more and no held-out split, check says that evaluations measure cases tuned on."""


class Finding(NamedTuple):
    level: Level
    file: str
    field: str
    text: str

    def line(self) -> str:
        return f"{self.level}: {self.file}: field {self.field!r}: {self.text}"


class CheckReport(NamedTuple):
    findings: list[Finding]
    cases: int
    """How many case files were read."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]


def check(tuning_file: Path, more_cases: Iterable[Path] = ()) -> CheckReport:
    """Every problem of the tuning in `tuning_file`, of its cases (and held-out and gate cases), and of the
    case files or folders in `more_cases`."""
    where = str(tuning_file)
    config, problems = read_tuning_file(tuning_file)
    findings = [_finding("error", where, p) for p in problems]
    extra = [(str(path), path) for path in more_cases]
    if config is None:
        alone = _read_cases(extra)
        return CheckReport(findings + alone.findings, alone.files)
    findings += _roles(config, where)
    folders = [("cases", config.cases)]
    if config.holdout is not None and config.holdout.cases is not None:
        folders.append(("holdout.cases", config.holdout.cases))
    if config.gate is not None and config.gate.folder is not None:
        folders.append(("gate.folder", config.gate.folder))
    read = {field: _read_cases([(field, folder)]) for field, folder in folders if folder.is_dir()}
    more = _read_cases(extra)
    for each in [*read.values(), more]:
        findings += each.findings
    train = read["cases"].valid if "cases" in read else []
    held = read["holdout.cases"].valid if "holdout.cases" in read else []
    if "cases" in read and not train:
        findings.append(Finding("warning", where, "cases", f"folder {config.cases} holds no case files"))
    findings += _split(config, where, train, held)
    return CheckReport(findings, sum(each.files for each in read.values()) + more.files)


def _finding(level: Level, file: str, problem: Problem) -> Finding:
    return Finding(level, file, problem.field, problem.text)


def _roles(config: TuningConfig, where: str) -> list[Finding]:
    """Warnings about each command role: where it writes, and the scripts it names."""
    findings = [
        _finding("warning", where, problem)
        for role in ("analyzer", "applier")
        for problem in unwritten(role, getattr(config, role))
    ]
    for role, step, prompt in prompt_files(config):
        if not prompt.is_file():
            findings.append(
                Finding("error", where, f"{role}.prompts.{step}", f"file {prompt} does not exist")
            )
    for role in ("runner", "analyzer", "applier"):
        adapter = getattr(config, role)
        if not isinstance(adapter, CommandAdapter) or adapter.cwd is None:
            continue
        for index, element in enumerate(adapter.argv):
            if "{" in element or element.startswith("-") or not element.endswith(SCRIPT_SUFFIXES):
                continue
            if not (adapter.cwd / element).is_file():
                text = f"{element} is not in the {role}'s working directory {adapter.cwd}"
                findings.append(Finding("warning", where, f"{role}.argv[{index}]", text))
    return findings


class Cases(NamedTuple):
    valid: list[Case]
    findings: list[Finding]
    files: int


def _read_cases(sources: list[tuple[str, Path]]) -> Cases:
    """The valid cases of every file at each source, a finding per problem (each file's own, a missing
    path named by the field or argument it came from, an id and rev given twice) and the files read."""
    files = 0
    cases: list[Case] = []
    findings: list[Finding] = []
    seen: dict[tuple[str, int], Path] = {}
    for field, source in sources:
        if not source.exists():
            findings.append(Finding("error", field, "(path)", f"{source} does not exist"))
            continue
        for path in case_files(source):
            files += 1
            case, problems = read_case(path)
            findings += [_finding("error", str(path), p) for p in problems]
            if case is None:
                continue
            first = seen.setdefault((case.id, case.rev), path)
            if first != path:
                text = f"case {case.id!r} rev {case.rev} is also in {first}; one of them would be ignored"
                findings.append(Finding("error", str(path), "id", text))
                continue
            cases.append(case)
    return Cases(cases, findings, files)


def min_flips(alpha: float = SIGNIFICANCE) -> int:
    """The fewest cases that must flip one way, and none back, for a paired comparison of two versions
    (the exact McNemar test the evaluations use) to be beyond chance at `alpha`."""
    flips = 1
    while mcnemar_exact(flips, 0) >= alpha:
        flips += 1
    return flips


def _split(config: TuningConfig, where: str, train: list[Case], held: list[Case]) -> list[Finding]:
    """Warnings about the held-out split: too small to tell two versions apart, or missing."""
    holdout = config.holdout
    if holdout is None:
        if len(train) < ADVISE_HOLDOUT_FROM:
            return []
        text = (
            f"none: evaluations of this tuning can only measure the {len(train)} cases it is tuned on "
            "(`tunefleet eval --split all`), which says little about new cases; add `holdout: "
            "{fraction: 0.2}` to hold some out"
        )
        return [Finding("warning", where, "holdout", text)]
    if holdout.fraction is not None:
        count = round(holdout.fraction * len(train))
        if count == 0 or count == len(train):
            text = (
                f"{holdout.fraction:g} of {len(train)} cases holds out {count}: a side of the split is empty"
            )
            return [Finding("error", where, "holdout.fraction", text)]
        field = "holdout.fraction"
    else:
        count, field = len(held), "holdout.cases"
        clash = sorted({c.id for c in held} & {c.id for c in train})
        if clash:
            text = f"case id {clash[0]!r} ({len(clash)} in all) is both held out and tuned on"
            return [Finding("error", where, field, text)]
    needed = min_flips()
    enough = math.ceil(needed / GAIN_SHOWN)
    if count >= enough:
        return []
    flips = f"going from fail to pass with none going back (paired test, {SIGNIFICANCE:.0%})"
    if count < needed:
        said = f"no difference between two versions can be beyond chance: it takes {needed} cases {flips}"
    else:
        said = f"a gain is beyond chance only when at least {needed} of them ({needed / count:.0%}) {flips}"
    tell = f"about {enough} held-out cases tell a gain of {GAIN_SHOWN * 100:.0f} points"
    text = f"{count} held-out case(s): {said}; {tell}"
    return [Finding("warning", where, field, text)]
