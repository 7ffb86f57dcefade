"""A tuning's history, joined from its repository and its store: the published versions (the first-parent
chain of the current version), the rejected candidates (kept under `refs/tunefleet/rejected/`) and the
candidates under gate now, each with the try it came from, its gate's verdict or guard's rejection, and
every evaluation of it. A read of files only: the API runs it off its event loop."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from service.core.io.files import read_model
from service.core.models.records import ApplyRecord, Feedback
from service.core.store import TuningStore
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.gate.models import GateRecord
from service.kinds.evals.gate.repo import CANDIDATES, REJECTED
from service.kinds.evals.guards.models import GUARD_FILE, GuardRejection
from service.kinds.evals.history.commits import CommitInfo, History, info
from service.kinds.evals.history.models import (
    EvalRate,
    GateFigures,
    Origin,
    VersionList,
    VersionRow,
    VersionStatus,
    VersionWhy,
)

GATE_FILE = "gate.json"


def attempt_root(tuning: TuningStore, origin: Origin) -> Path | None:
    """The attempt folder of `origin`, when it is a try of this tuning's (never a path out of it)."""
    if origin.phase not in ("nomem", "mem") or "/" in origin.case or origin.case in ("", ".", ".."):
        return None
    return tuning.case(origin.case, origin.rev).attempt(origin.phase, origin.attempt).root  # type: ignore[arg-type]


def _figures(root: Path | None, version: str) -> GateFigures | None:
    """The gate's (or a guard's) word on `version`, from the attempt folder that made it."""
    if root is None:
        return None
    applied = read_model(root / "apply.json", ApplyRecord)
    gate = read_model(root / GATE_FILE, GateRecord)
    guard = read_model(root / GUARD_FILE, GuardRejection)
    if guard is not None and guard.candidate == version:
        return GateFigures(verdict="rejected", why=guard.why, by=guard.guard)
    summary = applied.gate if applied is not None else None
    if summary is None and gate is None:
        return None
    figures = GateFigures(
        verdict=summary.verdict if summary is not None else gate.verdict,  # type: ignore[union-attr]
        why=summary.why if summary is not None else gate.why,  # type: ignore[union-attr]
        eval=summary.eval if summary is not None else gate.eval,  # type: ignore[union-attr]
        broken=summary.broken if summary is not None else gate.broken,  # type: ignore[union-attr]
        rebased=summary.rebased if summary is not None else False,
    )
    if gate is not None:
        figures.items = len(gate.items)
        figures.baseline_rate = gate.baseline_rate
        figures.candidate_rate = gate.candidate_rate
    return figures


def _decided(root: Path | None) -> bool:
    return root is not None and (root / "apply.json").exists()


class HistoryReader:
    """Reads one tuning's history (module docstring)."""

    def __init__(self, tuning: TuningStore, evals: EvalFiles | None) -> None:
        self.tuning = tuning
        self.evals = evals
        self.history = History(tuning.repo)

    def _row(self, found: CommitInfo, status: VersionStatus, current: str) -> VersionRow:
        commit = self.history.commit(found.id)
        added, removed = self.history.lines(found.parent, found.id)
        root = attempt_root(self.tuning, found.origin) if found.origin is not None else None
        return VersionRow(
            **asdict(found),
            status=status,
            current=found.id == current,
            added=added,
            removed=removed,
            tokens=self.history.tokens(commit),
            gate=_figures(root, found.id) if status != "initial" else None,
        )

    def versions(self, current: str | None = None) -> VersionList:
        """Every version and candidate, oldest first (`current`: the fleet's pointer; default main)."""
        head = current or self.history.main()
        rows: dict[str, VersionRow] = {}
        for commit in self.history.chain(head):
            status: VersionStatus = "published" if commit.parents else "initial"
            rows[str(commit.id)] = self._row(info(commit), status, head)
        for _, target in self.history.refs(REJECTED):
            if target not in rows:
                rows[target] = self._row(info(self.history.commit(target)), "rejected", head)
        for _, target in self.history.refs(CANDIDATES):
            found = info(self.history.commit(target))
            root = attempt_root(self.tuning, found.origin) if found.origin is not None else None
            if target not in rows and not _decided(root):
                rows[target] = self._row(found, "candidate", head)
        self._add_evals(rows)
        ordered = sorted(rows.values(), key=lambda row: (row.at, row.status != "initial"))
        return VersionList(tuning=self.tuning.name, current=head, versions=ordered)

    def _add_evals(self, rows: dict[str, VersionRow]) -> None:
        if self.evals is None:  # the report's history: its evaluations are reported on their own
            return
        for spec in self.evals.specs(self.tuning.name):
            row = rows.get(spec.version)
            if row is None:
                continue
            results = self.evals.results(spec.id)
            row.evals.append(
                EvalRate(eval=spec.id, purpose=spec.purpose, created_at=spec.created_at, rate=results.rate)
            )

    def why(self, row: VersionRow) -> VersionWhy:
        """The feedback and analysis that asked for `row`, and the gate's evidence on it."""
        root = attempt_root(self.tuning, row.origin) if row.origin is not None else None
        if root is None:
            return VersionWhy(tuning=self.tuning.name, version=row)
        analysis = root / "analysis.md"
        gate = read_model(root / GATE_FILE, GateRecord)
        return VersionWhy(
            tuning=self.tuning.name,
            version=row,
            feedback=read_model(root / "feedback.json", Feedback),
            analysis=analysis.read_text(errors="replace") if analysis.is_file() else None,
            gate=gate,
        )
