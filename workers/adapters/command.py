"""Runner, analyzer and applier as agent CLIs, run from an argv template (never a shell string).

Each argv element is rendered with `str.format_map`: `{name}` is replaced by the step's value for
`name` (a literal brace is written `{{` or `}}`). An unknown name is a ConfigError naming it, raised
when the adapter is built, before any case runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import structlog
from pydantic import ValidationError

from service.core.errors import ConfigError
from service.core.models.records import SEAL_FIELDS, RunOutput
from service.core.models.tuning import PLACEHOLDERS, CommandAdapter
from service.core.validation import describe_validation
from workers.adapters.base import (
    AnalyzeOutcome,
    AnalyzeRequest,
    ApplyOutcome,
    ApplyRequest,
    RunOutcome,
    RunRequest,
    StepExit,
)
from workers.adapters.folder import AgentFileRefused, StepFolder, read_agent_file
from workers.adapters.isolation import open_without_sandbox
from workers.adapters.process import AgentHost, ProcessResult, ProcessSpec, run_process
from workers.adapters.sandbox import SandboxMounts, agent_spec, check_sandbox, is_sandbox_setup_failure

log = structlog.get_logger()

MEMORY_KILL_EXITS = (137, -9)
"""128 + SIGKILL as a shell or container reports it, and SIGKILL as Python reports it."""

RUN_PLACEHOLDERS = PLACEHOLDERS["runner"]
ANALYZE_PLACEHOLDERS = PLACEHOLDERS["analyzer"]
APPLY_PLACEHOLDERS = PLACEHOLDERS["applier"]


class PlaceholderError(ConfigError):
    """An argv template uses a placeholder the step does not have, or is not a valid template."""


class _UnknownPlaceholderError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Values(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise _UnknownPlaceholderError(key)


def render_argv(template: Sequence[str], values: Mapping[str, str], step: str) -> list[str]:
    """Substitute `{name}` placeholders in each argv element."""
    rendered: list[str] = []
    for index, element in enumerate(template):
        try:
            rendered.append(element.format_map(_Values(values)))
        except _UnknownPlaceholderError as exc:
            known = ", ".join(sorted(values))
            raise PlaceholderError(
                f"{step}: field 'argv[{index}]' ({element!r}): unknown placeholder {{{exc.name}}}; "
                f"known: {known}"
            ) from None
        except (ValueError, IndexError, AttributeError, KeyError) as exc:
            raise PlaceholderError(
                f"{step}: field 'argv[{index}]' ({element!r}): not a valid template: {exc}"
            ) from exc
    return rendered


def check_argv(template: Sequence[str], names: frozenset[str], step: str) -> None:
    """Raise PlaceholderError now if rendering `template` for this step could fail later."""
    render_argv(template, dict.fromkeys(names, "x"), step)


def _step_exit(result: ProcessResult, timeout_s: float, sandbox_down: str | None) -> StepExit:
    if sandbox_down is not None or result.start_error:
        return StepExit(
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            error=sandbox_down or result.start_error,
            sandbox_down=sandbox_down,
        )
    if result.timed_out:
        return StepExit(
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            timed_out=True,
            error=f"timed out after {timeout_s:g} s",
        )
    error = None
    if result.exit_code != 0:
        error = f"exited {result.exit_code}" + (f": {result.last_line}" if result.last_line else "")
    return StepExit(exit_code=result.exit_code, duration_ms=result.duration_ms, error=error)


def _written(path: Path) -> tuple[bytes | None, str | None]:
    """What a process left in `path` (None if it wrote nothing there), or why the fleet did not read it
    (a link, a pipe, a device, a file too large: workers.adapters.folder.read_agent_file)."""
    try:
        return read_agent_file(path), None
    except AgentFileRefused as refused:
        return None, f"{path}: not read: {refused}"


def _parse_run_output(path: Path) -> RunOutput | None:
    """The runner's output file, None if it wrote none; an unreadable, refused or invalid one becomes a
    RunOutput with an error naming the file and the fields."""
    data, refused = _written(path)
    if refused is not None:
        return RunOutput(error=refused)
    if data is None:
        return None
    try:
        return RunOutput.model_validate_json(data)
    except ValidationError as exc:
        return RunOutput(error=describe_validation(exc, f"{path}: invalid RunOutput"))


def _read_run_output(path: Path, result: ProcessResult) -> RunOutput | None:
    """The output of a runner that exited: as `_parse_run_output`, a non-zero exit added as its error
    (the last log line quoted) unless the output has one."""
    output = _parse_run_output(path)
    code = result.exit_code
    if output is None or code == 0 or output.error is not None:
        return output
    detail = f": {result.last_line}" if result.last_line else ""
    return output.model_copy(update={"error": f"runner exited {code}{detail}"})


class CommandStep:
    """One role's agent CLI: its argv checked for the step's placeholders, run in the role's sandbox. A
    role of a case names its step and placeholders where it subclasses
    (`class CommandRunner(CommandStep, step="runner", names=RUN_PLACEHOLDERS)`); a goal step passes them."""

    STEP: ClassVar[str]
    NAMES: ClassVar[frozenset[str]]

    def __init_subclass__(cls, step: str, names: frozenset[str], **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.STEP, cls.NAMES = step, names

    def __init__(
        self,
        config: CommandAdapter,
        host: AgentHost,
        step: str | None = None,
        names: frozenset[str] | None = None,
    ) -> None:
        step = step if step is not None else self.STEP
        names = names if names is not None else self.NAMES
        check_sandbox(config.sandbox)
        check_argv(config.argv, names, step)
        self._config = config
        self._host = host
        self._step = step
        if config.sandbox.kind == "none":
            log.warning(
                "agent_sandbox_none",
                step=step,
                open=open_without_sandbox(host.powers, config.sandbox.network),
                advice="use sandbox kind bubblewrap, podman or docker (docs/adapters.md)",
            )

    def process_spec(
        self, values: Mapping[str, str], log_file: Path, mounts: SandboxMounts, default_cwd: Path
    ) -> ProcessSpec:
        """The process of this step: the rendered argv in the role's sandbox, under its keeper, with the
        role's own environment (workers/adapters/isolation.py)."""
        cwd = self._config.cwd or default_cwd
        mounts = replace(
            mounts,
            readonly=[*mounts.readonly, *([self._config.cwd] if self._config.cwd else [])],
            cwd=cwd,
        )
        return agent_spec(
            render_argv(self._config.argv, values, self._step),
            self._config.sandbox,
            self._host,
            mounts,
            self._config.env,
            name=f"tf-{self._step}-{uuid.uuid4().hex[:12]}",
            log_file=log_file,
            timeout_s=self._config.timeout_s,
        )

    def _sandbox_down(self, result: ProcessResult) -> str | None:
        """Why the sandbox could not run the agent at all, if that is how the step ended."""
        if self._config.sandbox.kind == "none":
            return None
        if result.start_error:
            return f"sandbox: {result.start_error}"
        if is_sandbox_setup_failure(self._config.sandbox, result.exit_code):
            return f"{self._step} exited {result.exit_code}: {result.last_line}"
        return None

    def step_exit(self, result: ProcessResult) -> StepExit:
        return _step_exit(result, self._config.timeout_s, self._sandbox_down(result))


class CommandRunner(CommandStep, step="runner", names=RUN_PLACEHOLDERS):
    """Runs the agent on a case; its exit code says whether the run counts."""

    async def run(self, request: RunRequest) -> RunOutcome:
        folder = StepFolder.ready(request.step_dir)
        for made in (request.workspace_dir, request.memory_dir):
            made.mkdir(parents=True, exist_ok=True)
        input_file = folder.give("input.json", request.task.model_dump_json().encode())
        output_file = folder.outputs / "output.json"
        values = {
            "input": str(input_file),
            "system": str(request.system_dir),
            "memory": str(request.memory_dir),
            "workspace": str(request.workspace_dir),
            "home": str(folder.home),
            "output": str(output_file),
            "version": request.version,
            "phase": request.phase,
            "attempt": str(request.attempt),
            "expected_skills": ",".join(request.expected_skills),
        }
        mounts = SandboxMounts(
            writable=[request.workspace_dir, request.memory_dir, folder.outputs, folder.home],
            readonly=[request.system_dir, folder.inputs],
            home=folder.home,
        )
        spec = self.process_spec(values, request.log_file, mounts, request.workspace_dir)
        return self._outcome(await run_process(spec), output_file)

    def _outcome(self, result: ProcessResult, output_file: Path) -> RunOutcome:
        """What the run was: the sandbox down (no run), void (infrastructure: it says nothing about the
        prose), or a run to grade, a timed-out one included (docs/adapters.md, the exit-code table)."""
        code = result.exit_code
        down = self._sandbox_down(result)
        if down is None and not result.timed_out and code == self._config.sandbox_exit_code:
            down = f"runner exited {code}: {result.last_line}"
        if down is not None:
            return RunOutcome(exit_code=code, duration_ms=result.duration_ms, sandbox_down=down)
        if result.timed_out:
            return _ended(result, timed_out=True, output=self._timed_out_output(output_file))
        if code in MEMORY_KILL_EXITS:
            return _ended(result, void="killed for memory (exit 137)")
        if result.start_error:
            return _ended(result, void=f"runner could not start: {_start_why(result.start_error)}")
        output = _read_run_output(output_file, result)
        if output is None:
            detail = f": {result.last_line}" if result.last_line else ""
            return _ended(result, void=f"runner exited {code} without writing {output_file.name}{detail}")
        return _ended(result, output=output, tail=code != 0 or output.error is not None)

    def _timed_out_output(self, output_file: Path) -> RunOutput:
        """A timed-out run's output: what it wrote, if anything, with the timeout as its error."""
        timed_out = f"timed out after {self._config.timeout_s:g} s"
        output = _parse_run_output(output_file) or RunOutput()
        error = f"{timed_out}; {output.error}" if output.error else timed_out
        return output.model_copy(update={"error": error})


def _ended(
    result: ProcessResult,
    *,
    output: RunOutput | None = None,
    void: str | None = None,
    timed_out: bool = False,
    tail: bool = True,
) -> RunOutcome:
    """A run's outcome, with the end of its log unless it ended cleanly (`tail` False)."""
    return RunOutcome(
        exit_code=result.exit_code,
        duration_ms=result.duration_ms,
        output=output,
        void=void,
        timed_out=timed_out,
        log_tail=(result.tail or None) if tail else None,
    )


def _start_why(start_error: str) -> str:
    """`cannot start ARGV0: WHY` (the keeper's words) as `ARGV0: WHY`."""
    return start_error.removeprefix("cannot start ")


class CommandAnalyzer(CommandStep, step="analyzer", names=ANALYZE_PLACEHOLDERS):
    """Grades a run; its process writes the feedback and the report into its own `out/` folder."""

    trusted = False

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        folder = StepFolder.ready(request.step_dir)
        inputs = {
            "case": folder.give("case.json", request.case.model_dump_json(indent=2).encode()),
            "run": folder.give(
                "run.json", request.run.model_dump_json(indent=2, exclude=set(SEAL_FIELDS)).encode()
            ),
            "brief": folder.give("brief.json", json.dumps(request.brief(), indent=2).encode()),
        }
        feedback_file = folder.outputs / "feedback.json"
        analysis_file = folder.outputs / "analysis.md"
        values = {
            **{name: str(path) for name, path in inputs.items()},
            "system": str(request.system_dir),
            "memory": str(request.memory_dir),
            "workspace": str(request.workspace_dir),
            "home": str(folder.home),
            "feedback": str(feedback_file),
            "analysis": str(analysis_file),
            "phase": request.phase,
            "attempt": str(request.attempt),
        }
        mounts = SandboxMounts(
            writable=[request.system_dir, request.memory_dir, folder.outputs, folder.home],
            readonly=[folder.inputs, request.workspace_dir],
            home=folder.home,
        )
        result = await run_process(self.process_spec(values, request.log_file, mounts, request.step_dir))
        feedback, refused = _written(feedback_file)
        analysis, report_refused = _written(analysis_file)
        if report_refused is not None:  # the report is for people: the grade stands without it
            log.warning("analysis_report_refused", reason=report_refused)
        return AnalyzeOutcome(
            exit=_refusing(self.step_exit(result), refused),
            feedback=feedback,
            analysis=analysis,
            source=str(feedback_file),
        )


class CommandApplier(CommandStep, step="applier", names=APPLY_PLACEHOLDERS):
    """Edits its copy of the system; its process writes the apply output into its own `out/` folder."""

    async def apply(self, request: ApplyRequest) -> ApplyOutcome:
        folder = StepFolder.ready(request.step_dir)
        given = request.feedback.model_dump_json(indent=2, exclude=set(SEAL_FIELDS))
        feedback_file = folder.give("feedback.json", given.encode())
        if request.budget is not None:  # beside the feedback: the guards' size budgets
            folder.give("budget.json", request.budget.model_dump_json(indent=2).encode())
        output_file = folder.outputs / "output.json"
        values = {
            "feedback": str(feedback_file),
            "worktree": str(request.worktree_dir),
            "home": str(folder.home),
            "output": str(output_file),
            "phase": request.phase,
            "attempt": str(request.attempt),
        }
        mounts = SandboxMounts(
            writable=[request.worktree_dir, folder.outputs, folder.home],
            readonly=[folder.inputs],
            home=folder.home,
        )
        result = await run_process(self.process_spec(values, request.log_file, mounts, request.worktree_dir))
        output, refused = _written(output_file)
        return ApplyOutcome(
            exit=_refusing(self.step_exit(result), refused), output=output, source=str(output_file)
        )


def _refusing(exit_: StepExit, refused: str | None) -> StepExit:
    """The step's exit, with why its output was not read as its error (when it has none of its own)."""
    if refused is None or exit_.error is not None:
        return exit_
    return exit_.model_copy(update={"error": refused})
