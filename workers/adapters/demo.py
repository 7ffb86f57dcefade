"""The built-in demo agents' common part and the demo runner: in-process and seeded, so the loop, the
tests and the demo run for real without a model. They hand back the same JSON a command agent writes
(the steps validate it against the same schema), write the run's memory and a log, and (the applier,
workers.adapters.demo_meta) edit a real worktree, but make no input or output files: nothing reads them.

The system's prose holds a rule when one of its files has a line `- rule: <slug>`; a skill is a
file `skills/<name>.md`. A case's demo knobs (workers.adapters.demo_knobs) say which rules it needs
and which faults it injects.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import structlog

from service.core.io.files import append_line
from service.core.models.records import RunOutput, Usage
from service.core.models.tuning import DemoAdapter
from service.kinds.cases.truth import prose_rules, run_pass_p
from workers.adapters.base import RunOutcome, RunRequest, StepRequest
from workers.adapters.demo_chance import run_passes
from workers.adapters.demo_knobs import DemoKnobs, read_knobs

log = structlog.get_logger()

ADD_RULE_LEAD = "add rule "
INJECTED_FAULT = "demo: injected infrastructure fault"
MEMORY_FILE = "memory.md"
RULES_DIR = "rules"
OUTAGE_EXIT = 75


def system_skills(system_dir: Path) -> list[str]:
    """The skills the system offers: the names of `skills/*.md`."""
    return sorted(path.stem for path in (system_dir / "skills").glob("*.md") if path.is_file())


def elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


class StepLog:
    """A step's log lines, as an agent's output would be, appended to its log file in one write."""

    def __init__(self, log_file: Path, step: str) -> None:
        self._file = log_file
        self._step = step
        self._lines: list[str] = []

    def say(self, line: str) -> None:
        self._lines.append(f"demo-{self._step}: {line}")

    def flush(self) -> None:
        if self._lines:
            append_line(self._file, "\n".join(self._lines))
            self._lines.clear()


class DemoStep:
    VIEWS_KEPT = 64

    def __init__(self, config: DemoAdapter) -> None:
        self._config = config
        self._views: dict[str, tuple[frozenset[str], list[str]]] = {}

    def _version_view(self, version: str, system_dir: Path) -> tuple[frozenset[str], list[str]]:
        """The rules and skills of a system version's read-only snapshot, read once per version (a
        version's content never changes)."""
        view = self._views.get(version)
        if view is None:
            view = frozenset(prose_rules(system_dir)), system_skills(system_dir)
            if len(self._views) >= self.VIEWS_KEPT:
                self._views.pop(next(iter(self._views)))
            self._views[version] = view
        return view

    def _rng(self, request: StepRequest, step: str, run_index: int = 0) -> random.Random:
        key = (self._config.seed, request.tuning, request.case_id, request.phase, request.attempt, run_index)
        return random.Random("|".join(map(str, (*key, step))))

    def _latency_s(self, knobs: DemoKnobs, base_ms: int, rng: random.Random) -> float:
        """How long the step takes in all (its latency, varied by the jitter)."""
        latency_ms = base_ms if knobs.latency_ms is None else knobs.latency_ms
        return max(0.0, latency_ms * (1 + self._config.jitter * (2 * rng.random() - 1))) / 1000

    @staticmethod
    async def _until(started: float, latency_s: float) -> None:
        """Wait out the rest of the step's latency, counted from `started` (monotonic): the step's own
        work, done before, is part of that time, as a real agent's would be (not added after it)."""
        await asyncio.sleep(max(0.0, started + latency_s - time.monotonic()))

    def _usage(self, knobs: DemoKnobs) -> Usage:
        tokens = knobs.tokens
        input_tokens = tokens * 7 // 10
        cost_usd = round(tokens / 1000 * self._config.usd_per_1k_tokens, 6)
        return Usage(input_tokens=input_tokens, output_tokens=tokens - input_tokens, cost_usd=cost_usd)


def knobs_of(request: StepRequest) -> DemoKnobs:
    """The case's demo knobs; JobFault when its demo mapping does not hold valid ones."""
    return read_knobs(DemoKnobs, request.demo, f"case {request.case_id}")


def _maybe_kill_worker(request: RunRequest, knobs: DemoKnobs, log: StepLog) -> None:
    """The `kills_worker` fault: the run takes its whole worker process down (SIGKILL), as a poison case
    does. Marker files in the case's folder (the attempt folder's grandparent, `r<rev>/`) count how
    often it already did, across processes, attempts and runs set aside: the knob is per case."""
    if knobs.kills_worker == 0:
        return
    case_dir = request.attempt_dir.parents[1]
    done = len(list(case_dir.glob("worker-killed-*")))
    if done < knobs.kills_worker:
        (case_dir / f"worker-killed-{done + 1}").touch()
        log.say("taking the worker down")
        log.flush()
        os.kill(os.getpid(), signal.SIGKILL)


class DemoRunner(DemoStep):
    """Passes when the prose holds all the case's rules (and, in phase mem, memory helps)."""

    async def run(self, request: RunRequest) -> RunOutcome:
        log = StepLog(request.log_file, "run")
        try:
            return await self._run(request, log)
        finally:
            log.flush()

    async def _run(self, request: RunRequest, log: StepLog) -> RunOutcome:
        started = time.monotonic()
        outage = self._config.outage_file
        if outage is not None and outage.exists():
            log.say(f"sandbox is down: {outage} exists")
            return RunOutcome(exit_code=OUTAGE_EXIT, duration_ms=0, sandbox_down="demo sandbox is down")
        knobs = knobs_of(request)
        rng = self._rng(request, "run", request.run_index)
        random_void = rng.random() < self._config.void_rate
        latency_s = self._latency_s(knobs, self._config.latency.run_ms, rng)
        log.say(f"case {request.case_id} {request.phase} try {request.attempt}")
        if knobs.kills_worker:  # the worker dies once the run has taken its time, before any outcome
            await self._until(started, latency_s)
            _maybe_kill_worker(request, knobs, log)
        outcome = self._outcome(request, knobs, rng, log, random_void)
        log.flush()
        await self._until(started, latency_s)
        return outcome.model_copy(update={"duration_ms": elapsed_ms(started)})

    def _outcome(
        self, request: RunRequest, knobs: DemoKnobs, rng: random.Random, log: StepLog, random_void: bool
    ) -> RunOutcome:
        """The run's outcome, its memory and log written (its duration is set once it has taken its time)."""
        key = f"{request.phase}-{request.attempt}"
        kills = knobs.kills.get(key, 0)
        if request.run_index <= kills:
            log.say("Killed")
            return RunOutcome(exit_code=137, duration_ms=0, void="killed for memory (exit 137)")
        if request.run_index <= kills + knobs.voids.get(key, 0) or random_void:
            log.say("error: the tool server went away")
            output = RunOutput(error=INJECTED_FAULT, usage=self._usage(knobs))
        else:
            output = self._attempt(request, knobs, rng, log)
        return RunOutcome(exit_code=0, duration_ms=0, output=output)

    def _attempt(self, request: RunRequest, knobs: DemoKnobs, rng: random.Random, log: StepLog) -> RunOutput:
        present, skills = self._version_view(request.version, request.system_dir)
        has_memory = (request.memory_dir / MEMORY_FILE).is_file()
        log.say(f"loaded skills: {', '.join(skills) or '(none)'}")
        if f"{request.phase}-{request.attempt}" in knobs.fails:
            answer = "failed by chance"
        else:
            pass_p = run_pass_p(knobs, present, request.phase, has_memory)
            passed = run_passes(self._config.seed, request, pass_p)
            answer = "pass" if passed else _failure(knobs, present, has_memory, request)
        if answer == "pass" and request.phase == "nomem":
            request.memory_dir.mkdir(parents=True, exist_ok=True)
            (request.memory_dir / MEMORY_FILE).write_text(
                f"# Memory of case {request.case_id}\n\n- The rules that worked: {', '.join(knobs.rules)}\n",
                encoding="utf-8",
            )
            log.say(f"wrote {MEMORY_FILE}")
        log.say(f"answer: {answer}")
        return RunOutput(
            answer=answer, turns=rng.randint(2, 9), skills_loaded=skills, usage=self._usage(knobs)
        )


def _failure(knobs: DemoKnobs, present: frozenset[str], has_memory: bool, request: RunRequest) -> str:
    """What a failed run answers: the first thing that held it back, or a slip when only chance did."""
    clashing = [rule for rule in knobs.forbids if rule in present]
    missing = [rule for rule in knobs.rules if rule not in present]
    harmed = [rule for rule in knobs.harms if rule in present]
    if clashing:
        return "broken by: " + ", ".join(clashing)
    if missing:
        return "missing: " + ", ".join(missing)
    if request.phase == "mem" and not (knobs.memory_helps and has_memory):
        return "memory did not help"
    return "slipped" + (" (harmed by: " + ", ".join(harmed) + ")" if harmed else "")
