"""Goal steps for agent CLIs: the runner's argv works the TODO, the analyzer's argv plans and reviews.

The argv is rendered with the goal step's placeholders (docs/adapters.md, "Goal steps"); the process
is told its step by `TUNEFLEET_STEP` (`plan`, `work` or `review`) and by `step` in `{brief}`. An argv
that uses a placeholder the goal's steps do not give is refused when the goal starts.
"""

from __future__ import annotations

from pathlib import Path

from service.core.models.tuning import CommandAdapter
from service.kinds.goals.models import GOAL_PLACEHOLDERS, GoalStep
from workers.adapters.command import CommandStep
from workers.adapters.folder import StepFolder
from workers.adapters.goal_base import (
    PLAN_OUTPUT,
    REVIEW_OUTPUT,
    WORK_PROGRESS,
    WORK_RESULT,
    GoalStepExit,
    GoalStepRequest,
)
from workers.adapters.process import AgentHost, run_process
from workers.adapters.sandbox import SandboxMounts

ROLE_OF: dict[GoalStep, str] = {"plan": "analyzer", "work": "runner", "review": "analyzer"}
STEP_INPUTS = ("todo", "progress", "worker_result", "changes")


class CommandGoalAgent:
    """One role's agent CLI taking goal steps."""

    def __init__(self, config: CommandAdapter, host: AgentHost, role: str) -> None:
        self._steps = {
            step: CommandStep(
                config.model_copy(update={"env": {**config.env, "TUNEFLEET_STEP": step}}),
                host,
                f"goal {step} ({role})",
                GOAL_PLACEHOLDERS[role],
            )
            for step, owner in ROLE_OF.items()
            if owner == role
        }

    async def goal_step(self, request: GoalStepRequest) -> GoalStepExit:
        command = self._steps[request.step]
        folder = StepFolder.ready(request.step_dir)
        brief = folder.give("brief.json", request.brief.model_dump_json(indent=2).encode())
        given = {name: path for name, path in request.inputs.items() if name in STEP_INPUTS}
        outputs = _outputs(request.step, folder)
        values = {
            "brief": str(brief),
            "input": str(brief),
            "workspace": str(request.workspace_dir),
            "system": str(request.system_dir),
            "home": str(folder.home),
            "iteration": str(request.iteration),
            "step": request.step,
            **{name: str(path) for name, path in given.items()},
            **{name: str(path) for name, path in outputs.items()},
        }
        for name in STEP_INPUTS:  # a plan has no progress, worker result or changes yet: empty files
            if name not in values:
                values[name] = str(folder.give(f"{name}.none", b""))
        values.setdefault("review", str(folder.outputs / REVIEW_OUTPUT))
        writable = [folder.outputs, folder.home]
        readonly = [folder.inputs, request.system_dir, *given.values()]
        if request.step == "work":
            writable.append(request.workspace_dir)
        else:
            readonly.append(request.workspace_dir)
        mounts = SandboxMounts(writable=writable, readonly=readonly, home=folder.home)
        cwd = request.workspace_dir if request.step == "work" else request.step_dir
        result = await run_process(command.process_spec(values, request.log_file, mounts, cwd))
        ended = command.step_exit(result)
        if ended.sandbox_down is not None:
            return GoalStepExit(
                exit_code=ended.exit_code, duration_ms=ended.duration_ms, sandbox_down=ended.sandbox_down
            )
        void = None
        if result.exit_code in (137, -9) and not result.timed_out:
            void = f"goal {request.step} agent killed (exit {result.exit_code})"
        elif result.start_error:
            void = f"goal {request.step} agent could not start: {result.start_error}"
        return GoalStepExit(
            exit_code=ended.exit_code, duration_ms=ended.duration_ms, error=ended.error, void=void
        )


def _outputs(step: GoalStep, folder: StepFolder) -> dict[str, Path]:
    """The step's output files (in `out/`), by placeholder name; `output` is the main one."""
    out = folder.outputs
    if step == "plan":
        return {"todo": out / PLAN_OUTPUT, "output": out / PLAN_OUTPUT}
    if step == "work":
        return {
            "progress": out / WORK_PROGRESS,
            "worker_result": out / WORK_RESULT,
            "output": out / WORK_RESULT,
        }
    return {"review": out / REVIEW_OUTPUT, "output": out / REVIEW_OUTPUT}
