"""The built-in demo runner, analyzer and applier: in-process and seeded, so the loop, the tests and
the demo run for real without a model. They hand back the same JSON a command agent writes (the
steps validate it against the same schema), write the run's memory and a log, and edit a real
worktree, but make no input or output files: nothing reads them.

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

from service.core.files import append_line
from service.core.models.case import SLUG_RE
from service.core.models.records import ApplyOutput, Feedback, Improvement, RunOutput, Usage
from service.core.models.tuning import DemoAdapter
from workers.adapters.base import (
    AnalyzeOutcome,
    AnalyzeRequest,
    ApplyOutcome,
    ApplyRequest,
    RunOutcome,
    RunRequest,
    StepExit,
    StepRequest,
)
from workers.adapters.demo_knobs import DemoKnobs, read_knobs

log = structlog.get_logger()

RULE_PREFIX = "- rule: "
ADD_RULE_LEAD = "add rule "
INJECTED_FAULT = "demo: injected infrastructure fault"
MEMORY_FILE = "memory.md"
RULES_DIR = "rules"
OUTAGE_EXIT = 75


def system_rules(system_dir: Path) -> set[str]:
    """The rules the prose holds: every `- rule: <slug>` line of every file (outside `.git`)."""
    rules: set[str] = set()
    for path in sorted(system_dir.rglob("*")):
        if ".git" in path.relative_to(system_dir).parts or not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip().startswith(RULE_PREFIX):
                rules.add(line.strip().removeprefix(RULE_PREFIX))
    return rules


def system_skills(system_dir: Path) -> list[str]:
    """The skills the system offers: the names of `skills/*.md`."""
    return sorted(path.stem for path in (system_dir / "skills").glob("*.md") if path.is_file())


def _elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


class _StepLog:
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


class _DemoStep:
    VIEWS_KEPT = 64

    def __init__(self, config: DemoAdapter) -> None:
        self._config = config
        self._views: dict[str, tuple[frozenset[str], list[str]]] = {}

    def _version_view(self, version: str, system_dir: Path) -> tuple[frozenset[str], list[str]]:
        """The rules and skills of a system version's read-only snapshot, read once per version (a
        version's content never changes)."""
        view = self._views.get(version)
        if view is None:
            view = frozenset(system_rules(system_dir)), system_skills(system_dir)
            if len(self._views) >= self.VIEWS_KEPT:
                self._views.pop(next(iter(self._views)))
            self._views[version] = view
        return view

    def _rng(self, request: StepRequest, step: str, run_index: int = 0) -> random.Random:
        key = (self._config.seed, request.tuning, request.case_id, request.phase, request.attempt, run_index)
        return random.Random("|".join(map(str, (*key, step))))

    async def _pause(self, knobs: DemoKnobs, base_ms: int, rng: random.Random) -> None:
        latency_ms = base_ms if knobs.latency_ms is None else knobs.latency_ms
        varied_ms = latency_ms * (1 + self._config.jitter * (2 * rng.random() - 1))
        await asyncio.sleep(max(0.0, varied_ms) / 1000)

    def _usage(self, knobs: DemoKnobs) -> Usage:
        tokens = knobs.tokens
        input_tokens = tokens * 7 // 10
        cost_usd = round(tokens / 1000 * self._config.usd_per_1k_tokens, 6)
        return Usage(input_tokens=input_tokens, output_tokens=tokens - input_tokens, cost_usd=cost_usd)


def knobs_of(request: StepRequest) -> DemoKnobs:
    """The case's demo knobs; JobFault when its demo mapping does not hold valid ones."""
    return read_knobs(DemoKnobs, request.demo, f"case {request.case_id}")


def _maybe_kill_worker(request: RunRequest, knobs: DemoKnobs, log: _StepLog) -> None:
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


class DemoRunner(_DemoStep):
    """Passes when the prose holds all the case's rules (and, in phase mem, memory helps)."""

    async def run(self, request: RunRequest) -> RunOutcome:
        log = _StepLog(request.log_file, "run")
        try:
            return await self._run(request, log)
        finally:
            log.flush()

    async def _run(self, request: RunRequest, log: _StepLog) -> RunOutcome:
        started = time.monotonic()
        outage = self._config.outage_file
        if outage is not None and outage.exists():
            log.say(f"sandbox is down: {outage} exists")
            return RunOutcome(exit_code=OUTAGE_EXIT, duration_ms=0, sandbox_down="demo sandbox is down")
        knobs = knobs_of(request)
        rng = self._rng(request, "run", request.run_index)
        random_void = rng.random() < self._config.void_rate
        log.say(f"case {request.case_id} {request.phase} try {request.attempt}")
        await self._pause(knobs, self._config.latency.run_ms, rng)
        key = f"{request.phase}-{request.attempt}"
        _maybe_kill_worker(request, knobs, log)
        kills = knobs.kills.get(key, 0)
        if request.run_index <= kills:
            log.say("Killed")
            return RunOutcome(
                exit_code=137, duration_ms=_elapsed_ms(started), void="killed for memory (exit 137)"
            )
        if request.run_index <= kills + knobs.voids.get(key, 0) or random_void:
            log.say("error: the tool server went away")
            output = RunOutput(error=INJECTED_FAULT, usage=self._usage(knobs))
        else:
            output = self._attempt(request, knobs, rng, log)
        return RunOutcome(exit_code=0, duration_ms=_elapsed_ms(started), output=output)

    def _attempt(self, request: RunRequest, knobs: DemoKnobs, rng: random.Random, log: _StepLog) -> RunOutput:
        present, skills = self._version_view(request.version, request.system_dir)
        missing = [rule for rule in knobs.rules if rule not in present]
        clashing = [rule for rule in knobs.forbids if rule in present]
        has_memory = (request.memory_dir / MEMORY_FILE).is_file()
        log.say(f"loaded skills: {', '.join(skills) or '(none)'}")
        if clashing:
            answer = "broken by: " + ", ".join(clashing)
        elif missing:
            answer = "missing: " + ", ".join(missing)
        elif request.phase == "mem" and not (knobs.memory_helps and has_memory):
            answer = "memory did not help"
        else:
            answer = "pass"
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


class DemoAnalyzer(_DemoStep):
    """Grades a demo run: void for injected faults, dataset findings for a flawed case, else prose."""

    trusted = True

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        started = time.monotonic()
        knobs = knobs_of(request)
        await self._pause(knobs, self._config.latency.analyze_ms, self._rng(request, "analyze"))
        feedback = self._grade(request, knobs)
        none = "(none)\n"
        scores = "".join(f"- {item}: {score:.1f}\n" for item, score in feedback.rubric.items()) or none
        changes = "".join(f"- ({imp.target}) {imp.lead}\n" for imp in feedback.improvements) or none
        rejected = "".join(
            f"- {e.phase} try {e.attempt}: {e.rejected}\n" for e in request.earlier if e.rejected
        )
        report = (
            f"# Analysis of {request.case.id}, {request.phase} try {request.attempt}\n\n"
            f"Verdict: **{feedback.verdict}**\n\n{feedback.summary}\n\n"
            f"## Scores\n\n{scores}\n## Improvements\n\n{changes}"
            + (f"\n## Edits the gate rejected\n\n{rejected}" if rejected else "")
        )
        return AnalyzeOutcome(
            exit=StepExit(exit_code=0, duration_ms=_elapsed_ms(started)),
            feedback=feedback.model_dump_json(indent=2).encode(),
            analysis=report.encode(),
            source="the demo analyzer's feedback",
        )

    def _grade(self, request: AnalyzeRequest, knobs: DemoKnobs) -> Feedback:
        run, ids = request.run, request.case.rubric_ids
        usage = self._usage(knobs)
        error = run.output.error or ""
        if run.void or error.startswith("demo: injected"):
            infra = run.void or error
            return Feedback(verdict="void", done=False, infra=infra, summary=f"void: {infra}", usage=usage)
        failing = {item: (0.0 if index == 0 else 1.0) for index, item in enumerate(ids)}
        if knobs.flawed:
            change = f"Rubric item {ids[0]} contradicts the input\nNo answer can satisfy both; fix the case."
            finding = Improvement(target="dataset", change=change)
            return Feedback(
                verdict="fail",
                done=False,
                rubric=failing,
                improvements=[finding],
                summary="The case cannot be passed as written.",
                usage=usage,
            )
        if run.output.answer == "pass":
            rubric = dict.fromkeys(ids, 1.0)
            return Feedback(
                verdict="pass", done=True, rubric=rubric, summary="Every item is met.", usage=usage
            )
        if knobs.structural:
            change = "Split the instructions into a planning part and an execution part\nThe rules conflict."
            improvements = [Improvement(target="prose", change=change)]
            summary = "The instructions need restructuring."
        else:
            present, _ = self._version_view(run.version, request.system_dir)
            improvements = [
                Improvement(target="prose", change=f"{ADD_RULE_LEAD}{rule}\nThe prose never states `{rule}`.")
                for rule in knobs.rules
                if rule not in present
            ]
            summary = f"The run answered: {run.output.answer or '(nothing)'}"
        return Feedback(
            verdict="fail",
            done=False,
            rubric=failing,
            improvements=improvements,
            summary=summary,
            usage=usage,
        )


class DemoApplier(_DemoStep):
    """Adds the rules that `add rule <slug>` improvements ask for, a few per apply, each with a skill."""

    async def apply(self, request: ApplyRequest) -> ApplyOutcome:
        started = time.monotonic()
        knobs = knobs_of(request)
        await self._pause(knobs, self._config.latency.apply_ms, self._rng(request, "apply"))
        if knobs.structural:
            output = ApplyOutput(
                structural="the instructions need a new section hierarchy (planning before execution)",
                usage=self._usage(knobs),
            )
        else:
            added = self._add_rules(request, knobs.rules_per_apply)
            summary = f"added rules: {', '.join(added)}" if added else "nothing to add"
            output = ApplyOutput(skills=added, summary=summary, usage=self._usage(knobs))
        log = _StepLog(request.log_file, "apply")
        log.say(output.structural or output.summary)
        log.flush()
        return ApplyOutcome(
            exit=StepExit(exit_code=0, duration_ms=_elapsed_ms(started)),
            output=output.model_dump_json(indent=2).encode(),
            source="the demo applier's output",
        )

    def _add_rules(self, request: ApplyRequest, rules_per_apply: int) -> list[str]:
        worktree = request.worktree_dir
        present = system_rules(worktree)
        wanted: list[str] = []
        for improvement in request.feedback.prose():
            slug = improvement.lead.removeprefix(ADD_RULE_LEAD).strip()
            is_add = improvement.lead.startswith(ADD_RULE_LEAD) and SLUG_RE.match(slug) is not None
            if is_add and slug not in present and slug not in wanted:
                wanted.append(slug)
        added = wanted[:rules_per_apply]
        if not added:
            return []
        # One file per rule: two applies made at once on one version edit no file in common, so that the
        # acceptance gate can re-apply one on top of the other (service.gate.repo.rebase).
        (worktree / RULES_DIR).mkdir(exist_ok=True)
        (worktree / "skills").mkdir(exist_ok=True)
        for slug in added:
            (worktree / RULES_DIR / f"{slug}.md").write_text(f"{RULE_PREFIX}{slug}\n", encoding="utf-8")
            (worktree / "skills" / f"{slug}.md").write_text(
                f"# Skill: {slug}\n\nApply rule {slug}.\n", encoding="utf-8"
            )
        return added
