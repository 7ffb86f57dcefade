"""The daemon's part in a tuning with a held-out split: evaluate the imported version on the held-out
cases before tuning starts, the final version once every train case has its outcome, then write the
tuning's report (service.evals.report).

`before_tuning` runs when the daemon registers the tuning, before it enqueues the train cases: the
items of the first evaluation are queued first, and they run on the imported commit whatever the
tuning publishes meanwhile (an evaluation's version is fixed when it is created). `advance` runs at
every tick of the daemon; it is idempotent (the evaluations' ids are fixed per tuning, and creating
one that exists is a no-op), so a daemon that restarts carries on where the last one stopped. Each
tick costs one Redis read per tuning until its train cases' counters say they all ended; only then
is the store read.
"""

from __future__ import annotations

import structlog

from service.core import keys
from service.core.errors import TunefleetError
from service.core.files import write_atomic
from service.core.store import Store, TuningStore
from service.evals.fleet import Evals
from service.evals.report import REPORT_FILE, build_report, final_eval_id, initial_eval_id, render_report
from service.evals.results import read_results
from service.evals.split import read_split

log = structlog.get_logger()

FINAL_STATES = ("completed", "difficult", "failed", "cancelled")


class HeldOutRuns:
    """The held-out evaluations of every tuning the daemon serves."""

    def __init__(self, evals: Evals, store: Store) -> None:
        self._evals = evals
        self._store = store
        self._told: dict[str, str] = {}
        """Tuning -> the last error its step logged."""

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
            return False
        split = read_split(tuning)
        if split is None or not await self._train_ended(tuning):
            return False
        final = self._evals.folder.eval(final_eval_id(tuning.name))
        if not final.exists():
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
        ended = ("finished", "cancelled")
        if not initial.exists() or read_results(final).status not in ended:
            return False
        if read_results(initial).status not in ended:
            return False
        report = build_report(tuning, self._evals.folder)
        write_atomic(report_file, render_report(report).encode())
        log.info("tuning_report_written", tuning=tuning.name, file=str(report_file))
        return True

    async def _train_ended(self, tuning: TuningStore) -> bool:
        """Whether every train case has its outcome: first by the live counters, then by the store."""
        counts = await self._evals.redis.hgetall(keys.stats(tuning.name))  # type: ignore[misc]
        stats = {k.decode(): int(v) for k, v in counts.items()}
        finished = sum(stats.get(f"state:{state}", 0) for state in FINAL_STATES)
        if finished < stats.get("queued", 0):
            return False
        cases = list(tuning.latest_revs())
        return bool(cases) and all(case.result_file.exists() for case in cases)
