"""The built-in demo runner, analyzer and applier: seeded, schema-true, and faithful to the case's knobs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.core.models.case import Case, RubricItem
from service.core.models.records import ApplyOutput, Feedback, Phase, RunRecord
from service.core.models.tuning import CommandAdapter, DemoAdapter, StepLatency
from workers.adapters.base import AnalyzeRequest, ApplyRequest, RunOutcome, RunRequest
from workers.adapters.command import CommandRunner
from workers.adapters.demo import INJECTED_FAULT, DemoRunner
from workers.adapters.demo_meta import DemoAnalyzer, DemoApplier
from workers.adapters.factory import build_analyzer, build_applier, build_prober, build_runner
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import DemoProber, SandboxProber

HOST = AgentHost(grace_s=1.0)
FAST = DemoAdapter(latency=StepLatency(run_ms=0, analyze_ms=0, apply_ms=0))


def _case(**knobs: object) -> Case:
    rubric = [RubricItem(id="r1", text="first"), RubricItem(id="r2", text="second")]
    return Case(id="c1", input="do the thing", rubric=rubric, demo=dict(knobs))


class Attempt:
    """The folders of one try, shared by its run, analysis and apply."""

    def __init__(self, root: Path, case: Case, phase: Phase = "nomem", attempt: int = 1) -> None:
        self.root, self.case, self.phase, self.attempt = root, case, phase, attempt
        self.dir = root / f"{phase}-{attempt}"
        for folder in (self.dir, root / "system", root / "memory", root / "workspace"):
            folder.mkdir(parents=True, exist_ok=True)
        self.system, self.memory = root / "system", root / "memory"

    def _common(self, log: str) -> dict[str, object]:
        return {
            "tuning": "t1",
            "case_id": self.case.id,
            "phase": self.phase,
            "attempt": self.attempt,
            "attempt_dir": self.dir,
            "step_dir": self.dir,
            "log_file": self.dir / log,
            "demo": self.case.demo,
        }

    def run_request(self, run_index: int = 1) -> RunRequest:
        return RunRequest.model_validate(
            {
                **self._common("run.log"),
                "task": self.case.task(),
                "run_index": run_index,
                "version": "v1",
                "system_dir": self.system,
                "memory_dir": self.memory,
                "workspace_dir": self.root / "workspace",
            }
        )

    def analyze_request(self, outcome: RunOutcome) -> AnalyzeRequest:
        run = RunRecord(
            version="v1",
            work="run",
            started_at=datetime.now(UTC),
            duration_ms=outcome.duration_ms,
            exit_code=outcome.exit_code,
            void=outcome.void,
            output=outcome.output or {},
        )
        return AnalyzeRequest.model_validate(
            {
                **self._common("analyze.log"),
                "case": self.case,
                "run": run,
                "system_dir": self.system,
                "memory_dir": self.memory,
                "workspace_dir": self.root / "workspace",
            }
        )

    def apply_request(self, feedback: Feedback) -> ApplyRequest:
        return ApplyRequest.model_validate(
            {
                **self._common("apply.log"),
                "case": self.case,
                "feedback": feedback,
                "worktree_dir": self.system,
            }
        )


async def _run_and_grade(attempt: Attempt, config: DemoAdapter = FAST) -> tuple[RunOutcome, Feedback]:
    outcome = await DemoRunner(config).run(attempt.run_request())
    graded = await DemoAnalyzer(config).analyze(attempt.analyze_request(outcome))
    assert graded.exit.exit_code == 0 and graded.analysis is not None and graded.feedback is not None
    return outcome, Feedback.model_validate_json(graded.feedback)


async def _apply(attempt: Attempt, feedback: Feedback) -> ApplyOutput:
    applied = await DemoApplier(FAST).apply(attempt.apply_request(feedback))
    assert applied.exit.exit_code == 0 and applied.output is not None
    return ApplyOutput.model_validate_json(applied.output)


async def test_same_seed_gives_same_runs(tmp_path: Path) -> None:
    """Runners with the same seed inject the same voids and write the same outputs; another seed differs."""

    async def pattern(seed: int, root: Path) -> list[str]:
        config = FAST.model_copy(update={"seed": seed, "void_rate": 0.5})
        attempt = Attempt(root, _case(rules=[]))
        runner = DemoRunner(config)
        return [
            (await runner.run(attempt.run_request(index))).model_dump_json(exclude={"duration_ms"})
            for index in range(1, 21)
        ]

    first, again = await pattern(7, tmp_path / "a"), await pattern(7, tmp_path / "b")
    assert first == again and any(INJECTED_FAULT in run for run in first)
    assert await pattern(8, tmp_path / "c") != first


async def test_run_passes_only_when_the_prose_holds_every_rule(tmp_path: Path) -> None:
    """A run names the rules the prose lacks, and passes (writing memory) once it holds them all."""
    attempt = Attempt(tmp_path, _case(rules=["cite-sources", "be-brief"]))
    (attempt.system / "prompt.md").write_text("# Prompt\n- rule: be-brief\n")
    outcome = await DemoRunner(FAST).run(attempt.run_request())
    assert outcome.output is not None and outcome.output.answer == "missing: cite-sources"
    assert not (attempt.memory / "memory.md").exists()
    (attempt.system / "more.md").write_text("- rule: cite-sources\n")
    outcome = await DemoRunner(FAST).run(attempt.run_request())
    assert outcome.output is not None and outcome.output.answer == "pass"
    assert (attempt.memory / "memory.md").exists()
    assert sorted(p.name for p in attempt.dir.iterdir()) == ["run.log"]  # in-process: no output file
    assert "demo-run: answer: pass" in attempt.run_request().log_file.read_text()


async def test_kills_then_voids_follow_the_run_index(tmp_path: Path) -> None:
    """The knobs kill the first runs of a try, make the next ones void, and leave the rest alone."""
    attempt = Attempt(tmp_path, _case(kills={"nomem-1": 1}, voids={"nomem-1": 2}))
    runner = DemoRunner(FAST)
    killed = await runner.run(attempt.run_request(1))
    assert killed.exit_code == 137 and killed.void == "killed for memory (exit 137)" and killed.output is None
    for index in (2, 3):
        outcome = await runner.run(attempt.run_request(index))
        assert outcome.output is not None and outcome.output.error == INJECTED_FAULT
    clean = await runner.run(attempt.run_request(4))
    assert clean.output is not None and clean.output.answer == "pass"
    other_try = await runner.run(Attempt(tmp_path / "other", attempt.case, attempt=2).run_request(1))
    assert other_try.output is not None and other_try.output.answer == "pass"


async def test_injected_fault_is_graded_void(tmp_path: Path) -> None:
    """The analyzer calls a run with an injected fault void and names the fault."""
    attempt = Attempt(tmp_path, _case(voids={"nomem-1": 1}))
    _, feedback = await _run_and_grade(attempt)
    assert feedback.verdict == "void" and not feedback.done and feedback.infra == INJECTED_FAULT


@pytest.mark.parametrize(
    ("memory_helps", "has_memory", "answer"),
    [(True, True, "pass"), (True, False, "memory did not help"), (False, True, "memory did not help")],
)
async def test_mem_phase_needs_helpful_memory(
    tmp_path: Path, memory_helps: bool, has_memory: bool, answer: str
) -> None:
    """In phase mem a run passes only if it starts from memory and the case lets memory help."""
    attempt = Attempt(tmp_path, _case(memory_helps=memory_helps), phase="mem")
    if has_memory:
        (attempt.memory / "memory.md").write_text("remember\n")
    outcome, feedback = await _run_and_grade(attempt)
    assert outcome.output is not None and outcome.output.answer == answer
    assert feedback.done is (answer == "pass")


async def test_analysis_and_apply_converge_on_the_rules(tmp_path: Path) -> None:
    """Each analysis asks for the missing rules, each apply adds a few with skills, until the run passes."""
    case = _case(rules=["a", "b", "c"], rules_per_apply=2)
    attempt = Attempt(tmp_path, case)
    outcome, feedback = await _run_and_grade(attempt)
    assert [i.lead for i in feedback.prose()] == ["add rule a", "add rule b", "add rule c"]
    assert feedback.rubric == {"r1": 0.0, "r2": 1.0}
    applied = await _apply(attempt, feedback)
    assert applied.skills == ["a", "b"] and (attempt.system / "skills" / "a.md").exists()
    outcome, feedback = await _run_and_grade(attempt)
    assert outcome.output is not None and outcome.output.skills_loaded == ["a", "b"]
    await _apply(attempt, feedback)
    outcome, feedback = await _run_and_grade(attempt)
    assert feedback.verdict == "pass" and feedback.done and feedback.rubric == {"r1": 1.0, "r2": 1.0}
    assert [(attempt.system / "rules" / f"{r}.md").read_text() for r in "abc"] == [
        "- rule: a\n",
        "- rule: b\n",
        "- rule: c\n",
    ]


async def test_structural_case_is_refused_by_the_applier(tmp_path: Path) -> None:
    """A structural case gets a restructuring proposal, which the applier answers as structural."""
    attempt = Attempt(tmp_path, _case(rules=["a"], structural=True))
    _, feedback = await _run_and_grade(attempt)
    assert [i.lead.split(" ")[0] for i in feedback.prose()] == ["Split"]
    applied = await _apply(attempt, feedback)
    assert applied.structural is not None and not (attempt.system / "rules").exists()


async def test_flawed_case_gets_dataset_findings_only(tmp_path: Path) -> None:
    """A flawed case's findings all target the dataset, so the loop can end it as a specification problem."""
    attempt = Attempt(tmp_path, _case(flawed=True))
    _, feedback = await _run_and_grade(attempt)
    assert feedback.verdict == "fail" and not feedback.prose()
    assert feedback.dataset_only() == "specification: Rubric item r1 contradicts the input"


async def test_outage_file_takes_the_sandbox_down(tmp_path: Path) -> None:
    """While the outage file exists runs report the sandbox down and the prober says why; both recover."""
    outage = tmp_path / "outage"
    outage.touch()
    config = FAST.model_copy(update={"outage_file": outage})
    attempt = Attempt(tmp_path, _case())
    down = await DemoRunner(config).run(attempt.run_request())
    assert down.exit_code == 75 and down.sandbox_down == "demo sandbox is down" and down.output is None
    assert await DemoProber(config).probe() is not None
    outage.unlink()
    assert await DemoProber(config).probe() is None
    up = await DemoRunner(config).run(attempt.run_request())
    assert up.output is not None and up.output.answer == "pass"


async def test_usage_splits_tokens_and_prices_them(tmp_path: Path) -> None:
    """A step reports the case's tokens split 70/30 and priced per thousand."""
    attempt = Attempt(tmp_path, _case(tokens=1000))
    outcome = await DemoRunner(FAST.model_copy(update={"usd_per_1k_tokens": 0.004})).run(
        attempt.run_request()
    )
    assert outcome.output is not None
    assert outcome.output.usage.model_dump() == {"input_tokens": 700, "output_tokens": 300, "cost_usd": 0.004}


async def test_demo_run_is_cancellable(tmp_path: Path) -> None:
    """A demo run waiting out its latency ends as soon as it is cancelled."""
    attempt = Attempt(tmp_path, _case(latency_ms=600_000))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(DemoRunner(FAST).run(attempt.run_request()), timeout=0.05)


def test_factory_dispatches_on_the_adapter_kind() -> None:
    """The factory builds demo agents for a demo config and command agents for a command config."""
    assert isinstance(build_runner(FAST, HOST), DemoRunner)
    assert isinstance(build_analyzer(FAST, HOST), DemoAnalyzer)
    assert isinstance(build_applier(FAST, HOST), DemoApplier)
    assert isinstance(build_prober(FAST), DemoProber)
    command = CommandAdapter(argv=["agent", "{input}"])
    assert isinstance(build_runner(command, HOST), CommandRunner)
    assert isinstance(build_prober(command), SandboxProber)
