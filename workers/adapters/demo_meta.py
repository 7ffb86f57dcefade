"""The built-in demo meta agent: the analyzer that grades a demo run and the applier that edits the
system's worktree (workers.adapters.demo has the runner and what the three share)."""

from __future__ import annotations

import time

from service.core.models.case import is_slug
from service.core.models.records import ApplyOutput, Feedback, Improvement
from service.kinds.cases.truth import RULE_PREFIX, prose_rules
from workers.adapters.base import AnalyzeOutcome, AnalyzeRequest, ApplyOutcome, ApplyRequest, StepExit
from workers.adapters.demo import (
    ADD_RULE_LEAD,
    RULES_DIR,
    DemoStep,
    StepLog,
    elapsed_ms,
    knobs_of,
)
from workers.adapters.demo_chance import judge_flips
from workers.adapters.demo_knobs import DemoKnobs


class DemoAnalyzer(DemoStep):
    """Grades a demo run: void for injected faults, dataset findings for a flawed case, else prose; its
    pass or fail verdict on the prose is flipped with the adapter's `judge_flip` (seeded)."""

    trusted = True

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        started = time.monotonic()
        knobs = knobs_of(request)
        latency_s = self._latency_s(knobs, self._config.latency.analyze_ms, self._rng(request, "analyze"))
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
        graded = feedback.model_dump_json(indent=2).encode()
        await self._until(started, latency_s)
        return AnalyzeOutcome(
            exit=StepExit(exit_code=0, duration_ms=elapsed_ms(started)),
            feedback=graded,
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
        passed = run.output.answer == "pass"
        if judge_flips(self._config.seed, request, self._config.judge_flip):
            passed = not passed
        if passed:
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


class DemoApplier(DemoStep):
    """Adds the rules that `add rule <slug>` improvements ask for, a few per apply, each with a skill."""

    async def apply(self, request: ApplyRequest) -> ApplyOutcome:
        started = time.monotonic()
        knobs = knobs_of(request)
        await self._until(
            started, self._latency_s(knobs, self._config.latency.apply_ms, self._rng(request, "apply"))
        )
        if knobs.structural:
            output = ApplyOutput(
                structural="the instructions need a new section hierarchy (planning before execution)",
                usage=self._usage(knobs),
            )
        else:
            added = self._add_rules(request, knobs.rules_per_apply)
            summary = f"added rules: {', '.join(added)}" if added else "nothing to add"
            output = ApplyOutput(skills=added, summary=summary, usage=self._usage(knobs))
        log = StepLog(request.log_file, "apply")
        log.say(output.structural or output.summary)
        log.flush()
        return ApplyOutcome(
            exit=StepExit(exit_code=0, duration_ms=elapsed_ms(started)),
            output=output.model_dump_json(indent=2).encode(),
            source="the demo applier's output",
        )

    def _add_rules(self, request: ApplyRequest, rules_per_apply: int) -> list[str]:
        worktree = request.worktree_dir
        present = prose_rules(worktree)
        wanted: list[str] = []
        for improvement in request.feedback.prose():
            slug = improvement.lead.removeprefix(ADD_RULE_LEAD).strip()
            is_add = improvement.lead.startswith(ADD_RULE_LEAD) and is_slug(slug)
            if is_add and slug not in present and slug not in wanted:
                wanted.append(slug)
        added = wanted[:rules_per_apply]
        if not added:
            return []
        # One file per rule: two applies made at once on one version edit no file in common, so that the
        # acceptance gate can re-apply one on top of the other (service.kinds.evals.gate.repo.rebase).
        (worktree / RULES_DIR).mkdir(exist_ok=True)
        (worktree / "skills").mkdir(exist_ok=True)
        for slug in added:
            (worktree / RULES_DIR / f"{slug}.md").write_text(f"{RULE_PREFIX}{slug}\n", encoding="utf-8")
            (worktree / "skills" / f"{slug}.md").write_text(
                f"# Skill: {slug}\n\nApply rule {slug}.\n", encoding="utf-8"
            )
        return added
