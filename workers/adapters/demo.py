"""The built-in demo runner, analyzer and applier: in-process, seeded, and writing the same files
a command agent writes, so the loop, the tests and the demo run for real without a model.

The system's prose holds a rule when one of its files has a line `- rule: <slug>`; a skill is a
file `skills/<name>.md`. A case's `demo` knobs say which rules it needs and which faults it injects.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import structlog

from service.files import append_line
from service.models.case import SLUG_RE
from service.models.records import ApplyOutput, Feedback, Improvement, RunOutput, Usage
from service.models.tuning import DemoAdapter
from workers.adapters.base import AnalyzeRequest, ApplyRequest, RunOutcome, RunRequest, StepExit, StepRequest

log = structlog.get_logger()

RULE_PREFIX = "- rule: "
ADD_RULE_LEAD = "add rule "
INJECTED_FAULT = "demo: injected infrastructure fault"
MEMORY_FILE = "memory.md"
RULES_FILE = "rules.md"
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


def _say(log_file: Path, step: str, *lines: str) -> None:
    """Append lines to the step's log, as an agent's output would be."""
    append_line(log_file, "".join(f"demo-{step}: {line}\n" for line in lines))


class _DemoStep:
    def __init__(self, config: DemoAdapter) -> None:
        self._config = config

    def _rng(self, request: StepRequest, step: str, run_index: int = 0) -> random.Random:
        key = (self._config.seed, request.tuning, request.case.id, request.phase, request.attempt, run_index)
        return random.Random("|".join(map(str, (*key, step))))

    async def _pause(self, request: StepRequest, base_ms: int, rng: random.Random) -> None:
        latency_ms = request.case.demo.latency_ms
        latency_ms = base_ms if latency_ms is None else latency_ms
        varied_ms = latency_ms * (1 + self._config.jitter * (2 * rng.random() - 1))
        await asyncio.sleep(max(0.0, varied_ms) / 1000)

    def _usage(self, request: StepRequest) -> Usage:
        tokens = request.case.demo.tokens
        input_tokens = tokens * 7 // 10
        cost_usd = round(tokens / 1000 * self._config.usd_per_1k_tokens, 6)
        return Usage(input_tokens=input_tokens, output_tokens=tokens - input_tokens, cost_usd=cost_usd)


def _maybe_kill_worker(request: RunRequest) -> None:
    """The `kills_worker` fault: the run takes its whole worker process down (SIGKILL), as a poison case
    does. Marker files in the attempt folder count how often it already did, across processes."""
    done = len(list(request.attempt_dir.glob("worker-killed-*")))
    if done < request.case.demo.kills_worker:
        (request.attempt_dir / f"worker-killed-{done + 1}").touch()
        _say(request.log_file, "run", "taking the worker down")
        os.kill(os.getpid(), signal.SIGKILL)


class DemoRunner(_DemoStep):
    """Passes when the prose holds all the case's rules (and, in phase mem, memory helps)."""

    async def run(self, request: RunRequest) -> RunOutcome:
        started = time.monotonic()
        outage = self._config.outage_file
        if outage is not None and outage.exists():
            _say(request.log_file, "run", f"sandbox is down: {outage} exists")
            return RunOutcome(exit_code=OUTAGE_EXIT, duration_ms=0, sandbox_down="demo sandbox is down")
        rng = self._rng(request, "run", request.run_index)
        random_void = rng.random() < self._config.void_rate
        knobs = request.case.demo
        _say(request.log_file, "run", f"case {request.case.id} {request.phase} try {request.attempt}")
        await self._pause(request, self._config.latency.run_ms, rng)
        key = f"{request.phase}-{request.attempt}"
        _maybe_kill_worker(request)
        kills = knobs.kills.get(key, 0)
        if request.run_index <= kills:
            _say(request.log_file, "run", "Killed")
            return RunOutcome(
                exit_code=137, duration_ms=_elapsed_ms(started), void="killed for memory (exit 137)"
            )
        if request.run_index <= kills + knobs.voids.get(key, 0) or random_void:
            _say(request.log_file, "run", "error: the tool server went away")
            output = RunOutput(error=INJECTED_FAULT, usage=self._usage(request))
        else:
            output = self._attempt(request, rng)
        request.output_file.parent.mkdir(parents=True, exist_ok=True)
        request.output_file.write_text(output.model_dump_json(indent=2), encoding="utf-8")
        log.debug("demo_run_done", case=request.case.id, phase=request.phase, answer=output.answer)
        return RunOutcome(exit_code=0, duration_ms=_elapsed_ms(started), output=output)

    def _attempt(self, request: RunRequest, rng: random.Random) -> RunOutput:
        knobs = request.case.demo
        present = system_rules(request.system_dir)
        skills = system_skills(request.system_dir)
        missing = [rule for rule in knobs.rules if rule not in present]
        has_memory = (request.memory_dir / MEMORY_FILE).is_file()
        _say(request.log_file, "run", f"loaded skills: {', '.join(skills) or '(none)'}")
        if missing:
            answer = "missing: " + ", ".join(missing)
        elif request.phase == "mem" and not (knobs.memory_helps and has_memory):
            answer = "memory did not help"
        else:
            answer = "pass"
        if answer == "pass" and request.phase == "nomem":
            request.memory_dir.mkdir(parents=True, exist_ok=True)
            (request.memory_dir / MEMORY_FILE).write_text(
                f"# Memory of case {request.case.id}\n\n- The rules that worked: {', '.join(knobs.rules)}\n",
                encoding="utf-8",
            )
            _say(request.log_file, "run", f"wrote {MEMORY_FILE}")
        _say(request.log_file, "run", f"answer: {answer}")
        return RunOutput(
            answer=answer, turns=rng.randint(2, 9), skills_loaded=skills, usage=self._usage(request)
        )


class DemoAnalyzer(_DemoStep):
    """Grades a demo run: void for injected faults, dataset findings for a flawed case, else prose."""

    trusted = True

    async def analyze(self, request: AnalyzeRequest) -> StepExit:
        started = time.monotonic()
        await self._pause(request, self._config.latency.analyze_ms, self._rng(request, "analyze"))
        feedback = self._grade(request)
        request.feedback_file.parent.mkdir(parents=True, exist_ok=True)
        request.feedback_file.write_text(feedback.model_dump_json(indent=2), encoding="utf-8")
        none = "(none)\n"
        scores = "".join(f"- {item}: {score:.1f}\n" for item, score in feedback.rubric.items()) or none
        changes = "".join(f"- ({imp.target}) {imp.lead}\n" for imp in feedback.improvements) or none
        request.analysis_file.write_text(
            f"# Analysis of {request.case.id}, {request.phase} try {request.attempt}\n\n"
            f"Verdict: **{feedback.verdict}**\n\n{feedback.summary}\n\n"
            f"## Scores\n\n{scores}\n## Improvements\n\n{changes}",
            encoding="utf-8",
        )
        _say(request.log_file, "analyze", f"verdict: {feedback.verdict}")
        return StepExit(exit_code=0, duration_ms=_elapsed_ms(started))

    def _grade(self, request: AnalyzeRequest) -> Feedback:
        run, knobs, ids = request.run, request.case.demo, request.case.rubric_ids
        usage = self._usage(request)
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
            present = system_rules(request.system_dir)
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

    async def apply(self, request: ApplyRequest) -> StepExit:
        started = time.monotonic()
        await self._pause(request, self._config.latency.apply_ms, self._rng(request, "apply"))
        if request.case.demo.structural:
            output = ApplyOutput(
                structural="the instructions need a new section hierarchy (planning before execution)",
                usage=self._usage(request),
            )
        else:
            added = self._add_rules(request)
            summary = f"added rules: {', '.join(added)}" if added else "nothing to add"
            output = ApplyOutput(skills=added, summary=summary, usage=self._usage(request))
        request.output_file.parent.mkdir(parents=True, exist_ok=True)
        request.output_file.write_text(output.model_dump_json(indent=2), encoding="utf-8")
        _say(request.log_file, "apply", output.structural or output.summary)
        return StepExit(exit_code=0, duration_ms=_elapsed_ms(started))

    def _add_rules(self, request: ApplyRequest) -> list[str]:
        worktree = request.worktree_dir
        present = system_rules(worktree)
        wanted: list[str] = []
        for improvement in request.feedback.prose():
            slug = improvement.lead.removeprefix(ADD_RULE_LEAD).strip()
            is_add = improvement.lead.startswith(ADD_RULE_LEAD) and SLUG_RE.match(slug) is not None
            if is_add and slug not in present and slug not in wanted:
                wanted.append(slug)
        added = wanted[: request.case.demo.rules_per_apply]
        if not added:
            return []
        rules_file = worktree / RULES_FILE
        text = rules_file.read_text(encoding="utf-8") if rules_file.exists() else "# Rules\n\n"
        text = text if text.endswith("\n") else text + "\n"
        rules_file.write_text(text + "".join(f"{RULE_PREFIX}{slug}\n" for slug in added), encoding="utf-8")
        (worktree / "skills").mkdir(exist_ok=True)
        for slug in added:
            (worktree / "skills" / f"{slug}.md").write_text(
                f"# Skill: {slug}\n\nApply rule {slug}.\n", encoding="utf-8"
            )
        return added
