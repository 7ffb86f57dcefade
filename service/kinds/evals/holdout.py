"""The daemon's part in a tuning with a held-out split: evaluate the imported version on the held-out
cases before tuning starts, the final version once every train case has its outcome, then write the
tuning's report (service.kinds.evals.report).

`before_tuning` runs when the daemon registers the tuning, before it enqueues the train cases: the
items of the first evaluation are queued first, and they run on the imported commit whatever the
tuning publishes meanwhile (an evaluation's version is fixed when it is created). `advance` runs at
every tick of the daemon; it is idempotent (the evaluations' ids are fixed per tuning, and creating
one that exists is a no-op), so a daemon that restarts carries on where the last one stopped. Each
tick costs one Redis read per tuning: the store is read when the live counters say the train cases
(then the evaluations' items) all ended, and the evaluations' folders at most every `walk_every_s`
besides (the daemon's reconcile interval), in case a counter missed an outcome.
"""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from service.core import keys
from service.core.errors import TunefleetError
from service.core.io.files import write_atomic
from service.core.store import Store, TuningStore
from service.kinds.evals.counters import OUTCOMES, eval_progress_fields
from service.kinds.evals.fleet import Evals
from service.kinds.evals.models import Purpose
from service.kinds.evals.names import final_eval_id, initial_eval_id
from service.kinds.evals.report import REPORT_FILE, build_report, ours, render_report
from service.kinds.evals.results import read_results
from service.kinds.evals.split import read_split
from service.kinds.evals.store import EvalStore
from service.kinds.evals.versions import current_main

log = structlog.get_logger()

FINAL_STATES = ("completed", "difficult", "failed", "cancelled")


class HeldOutRuns:
    """The held-out evaluations of every tuning the daemon serves."""

    def __init__(self, evals: Evals, store: Store, walk_every_s: float) -> None:
        self._evals = evals
        self._store = store
        self._walk_every_s = walk_every_s
        self._told: dict[str, str] = {}
        """Tuning -> the last error its step logged."""
        self._walked: dict[str, float] = {}
        """Tuning -> when its evaluations' folders were last read (monotonic seconds)."""
        self._reported: dict[str, str] = {}
        """Tuning -> its `main` when its REPORT.md was last written by this daemon."""

    async def before_tuning(self, tuning: str) -> bool:
        """Queue the evaluation of the imported version (once); True when the tuning has a split."""
        tuning_store = self._store.tuning(tuning)
        split = read_split(tuning_store)
        if split is None:
            return False
        await self._evals.create(
            tuning,
            version="initial",
            split="holdout",
            repeats=split.config.repeats,
            name=initial_eval_id(tuning),
            purpose="holdout-initial",
        )
        return True

    async def advance(self) -> list[str]:
        """One step for every tuning with a split; the reports written now."""
        written = []
        for name in self._store.tuning_names():
            try:
                if await self._advance(self._store.tuning(name)):
                    written.append(name)
            except TunefleetError as exc:  # its split's folder vanished, say: tried again next tick
                if self._told.get(name) != str(exc):  # logged once, not at every tick
                    log.error("holdout_step_failed", tuning=name, error=str(exc))
                self._told[name] = str(exc)
        return written

    async def _advance(self, tuning: TuningStore) -> bool:
        report_file = tuning.root / REPORT_FILE
        if report_file.exists():
            self._refresh(tuning, report_file)
            return False
        split = read_split(tuning)
        if split is None:
            return False
        raw = await self._evals.redis.hgetall(keys.stats(tuning.name))  # type: ignore[misc]
        stats = {k.decode(): int(v) for k, v in raw.items()}
        final = self._evals.folder.eval(final_eval_id(tuning.name))
        if not final.exists():
            if not self._train_ended(tuning, stats):
                return False
            spec = await self._evals.create(
                tuning.name,
                version="main",
                split="holdout",
                repeats=split.config.repeats,
                name=final_eval_id(tuning.name),
                purpose="holdout-final",
            )
            log.info("holdout_final_queued", tuning=tuning.name, eval=spec.id, version=spec.version)
            return False
        initial = self._evals.folder.eval(initial_eval_id(tuning.name))
        if not initial.exists() or not self._worth_a_walk(tuning.name, stats):
            return False
        if not self._own(tuning.name, initial, "holdout-initial") or not self._own(
            tuning.name, final, "holdout-final"
        ):
            return False
        ended = ("finished", "cancelled")
        if read_results(final).status not in ended or read_results(initial).status not in ended:
            return False
        if not self._train_ended(tuning, stats):  # a case submitted since: the report waits for it
            return False
        report = build_report(tuning, self._evals.folder)
        write_atomic(report_file, render_report(report).encode())
        if report.main is not None:
            self._reported[tuning.name] = report.main
        log.info("tuning_report_written", tuning=tuning.name, file=str(report_file))
        return True

    def _own(self, tuning: str, found: EvalStore, purpose: Purpose) -> bool:
        """Whether the evaluation under the daemon's id is the daemon's own: the report is written
        only from the fleet's measure (service.kinds.evals.names); another is logged once and ignored."""
        spec = found.spec()
        if ours(spec, tuning, purpose):
            return True
        error = (
            f"evaluation {spec.id!r} (tuning {spec.tuning}, purpose {spec.purpose}) holds the id of the "
            f"daemon's {purpose} run: no report is written from it; remove its folder {found.root}"
        )
        if self._told.get(tuning) != error:
            log.error("holdout_eval_not_ours", tuning=tuning, eval=spec.id, error=error)
        self._told[tuning] = error
        return False

    def _refresh(self, tuning: TuningStore, report_file: Path) -> None:
        """Write the report again when `main` moved since it was written (once per move, and once per
        tuning when this daemon starts): it then says that it is stale and how to measure `main`."""
        main = current_main(tuning)
        if main is None or self._reported.get(tuning.name) == main:
            return
        report = build_report(tuning, self._evals.folder)
        write_atomic(report_file, render_report(report).encode())
        self._reported[tuning.name] = main
        if report.stale:
            log.info("tuning_report_stale", tuning=tuning.name, file=str(report_file), main=main)

    def _train_ended(self, tuning: TuningStore, stats: dict[str, int]) -> bool:
        """Whether every train case has its outcome: first by the live counters, then by the store."""
        finished = sum(stats.get(f"state:{state}", 0) for state in FINAL_STATES)
        if finished < stats.get("queued", 0):
            return False
        cases = list(tuning.latest_revs())
        return bool(cases) and all(case.result_file.exists() for case in cases)

    def _worth_a_walk(self, tuning: str, stats: dict[str, int]) -> bool:
        """Whether to read both evaluations' folders now: when their counters say every item ended, or
        once every `walk_every_s` (an outcome whose event was lost, with its worker, moves no counter)."""
        progress = eval_progress_fields(stats)
        ended = all(
            sum(progress.get(eval_id, {}).get(outcome, 0) for outcome in OUTCOMES)
            >= progress.get(eval_id, {}).get("items", 1)
            for eval_id in (initial_eval_id(tuning), final_eval_id(tuning))
        )
        now = time.monotonic()
        if ended or now - self._walked.get(tuning, 0.0) >= self._walk_every_s:
            self._walked[tuning] = now
            return True
        return False
