"""Runner, analyzer and applier as agent CLIs, run from an argv template (never a shell string).

Each argv element is rendered with `str.format_map`: `{name}` is replaced by the step's value for
`name` (a literal brace is written `{{` or `}}`). An unknown name is a ConfigError naming it, raised
when the adapter is built, before any case runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from service.errors import ConfigError
from service.files import write_atomic, write_json
from service.models.records import RunOutput
from service.models.tuning import PLACEHOLDERS, CommandAdapter
from workers.adapters.base import (
    AnalyzeOutcome,
    AnalyzeRequest,
    ApplyOutcome,
    ApplyRequest,
    RunOutcome,
    RunRequest,
    StepExit,
)
from workers.adapters.process import ProcessResult, ProcessSpec, run_process
from workers.adapters.sandbox import SandboxMounts, check_sandbox, is_sandbox_setup_failure, wrap_argv

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


def _step_exit(result: ProcessResult, timeout_s: float) -> StepExit:
    if result.start_error:
        return StepExit(exit_code=result.exit_code, duration_ms=result.duration_ms, error=result.start_error)
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


def _written(path: Path) -> bytes | None:
    """What a process left in `path`, None if it wrote nothing there."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _read_run_output(path: Path, result: ProcessResult) -> RunOutput:
    """The runner's output file; a missing or invalid one becomes a RunOutput with an error."""
    code = result.exit_code
    detail = f": {result.last_line}" if code != 0 and result.last_line else ""
    try:
        output = RunOutput.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return RunOutput(error=f"runner exited {code} without writing {path.name}{detail}")
    except OSError as exc:
        return RunOutput(error=f"{path}: cannot read: {exc.strerror or exc}")
    except ValidationError as exc:
        fields = [
            (".".join(str(part) for part in err["loc"]) or "(root)", err["msg"]) for err in exc.errors()
        ]
        problems = "; ".join(f"field {name!r}: {msg}" for name, msg in fields)
        return RunOutput(error=f"{path}: invalid RunOutput: {problems}")
    if code != 0 and output.error is None:
        output = output.model_copy(update={"error": f"runner exited {code}{detail}"})
    return output


class _CommandStep:
    def __init__(self, config: CommandAdapter, grace_s: float, step: str, names: frozenset[str]) -> None:
        check_argv(config.argv, names, step)
        self._config = config
        self._grace_s = grace_s
        self._step = step

    def _spec(self, values: Mapping[str, str], log_file: Path, default_cwd: Path) -> ProcessSpec:
        return ProcessSpec(
            argv=render_argv(self._config.argv, values, self._step),
            log_file=log_file,
            timeout_s=self._config.timeout_s,
            grace_s=self._grace_s,
            env=self._config.env,
            cwd=self._config.cwd or default_cwd,
        )


class CommandRunner(_CommandStep):
    """Runs the agent on a case; its exit code says whether the run counts."""

    def __init__(self, config: CommandAdapter, grace_s: float) -> None:
        check_sandbox(config.sandbox)
        super().__init__(config, grace_s, "runner", RUN_PLACEHOLDERS)

    async def run(self, request: RunRequest) -> RunOutcome:
        for folder in (request.workspace_dir, request.memory_dir):
            folder.mkdir(parents=True, exist_ok=True)
        write_atomic(request.input_file, request.input_json().encode(), durable=False)
        values = {
            "case": str(request.case_file),
            "input": str(request.input_file),
            "system": str(request.system_dir),
            "memory": str(request.memory_dir),
            "workspace": str(request.workspace_dir),
            "output": str(request.output_file),
            "attempt_dir": str(request.attempt_dir),
            "version": request.version,
            "phase": request.phase,
            "attempt": str(request.attempt),
            "expected_skills": ",".join(request.expected_skills),
        }
        spec = self._spec(values, request.log_file, request.workspace_dir)
        writable = [
            request.workspace_dir,
            request.memory_dir,
            request.attempt_dir,
            request.output_file.parent,
        ]
        mounts = SandboxMounts(
            writable=writable,
            readonly=[request.system_dir, request.input_file, request.case_file],
            cwd=spec.cwd,
            env_names=sorted(self._config.env),
        )
        spec = replace(spec, argv=wrap_argv(spec.argv, self._config.sandbox, mounts))
        return self._outcome(await run_process(spec), request.output_file)

    def _outcome(self, result: ProcessResult, output_file: Path) -> RunOutcome:
        code, duration_ms = result.exit_code, result.duration_ms
        sandboxed = self._config.sandbox.kind != "none"
        if result.start_error and sandboxed:
            return RunOutcome(
                exit_code=code, duration_ms=duration_ms, sandbox_down=f"sandbox: {result.start_error}"
            )
        if result.timed_out:
            return RunOutcome(
                exit_code=code, duration_ms=duration_ms, void=f"timed out after {self._config.timeout_s:g} s"
            )
        if code == self._config.sandbox_exit_code or is_sandbox_setup_failure(self._config.sandbox, code):
            down = f"runner exited {code}: {result.last_line}"
            return RunOutcome(exit_code=code, duration_ms=duration_ms, sandbox_down=down)
        if code in MEMORY_KILL_EXITS:
            return RunOutcome(exit_code=code, duration_ms=duration_ms, void="killed for memory (exit 137)")
        if result.start_error:
            output = RunOutput(error=result.start_error)
        else:
            output = _read_run_output(output_file, result)
        return RunOutcome(exit_code=code, duration_ms=duration_ms, output=output)


class CommandAnalyzer(_CommandStep):
    """Grades a run: its process reads the brief and writes the feedback and analysis files."""

    trusted = False

    def __init__(self, config: CommandAdapter, grace_s: float) -> None:
        super().__init__(config, grace_s, "analyzer", ANALYZE_PLACEHOLDERS)

    async def analyze(self, request: AnalyzeRequest) -> AnalyzeOutcome:
        request.workspace_dir.mkdir(parents=True, exist_ok=True)  # its cwd: a demo runner makes none
        write_json(request.brief_file, request.brief(), durable=False)
        request.feedback_file.unlink(missing_ok=True)  # a second round must not read the first one's
        values = {
            "case": str(request.case_file),
            "run": str(request.run_file),
            "system": str(request.system_dir),
            "memory": str(request.memory_dir),
            "workspace": str(request.workspace_dir),
            "brief": str(request.brief_file),
            "feedback": str(request.feedback_file),
            "analysis": str(request.analysis_file),
            "attempt_dir": str(request.attempt_dir),
            "phase": request.phase,
            "attempt": str(request.attempt),
        }
        result = await run_process(self._spec(values, request.log_file, request.workspace_dir))
        return AnalyzeOutcome(
            exit=_step_exit(result, self._config.timeout_s),
            feedback=_written(request.feedback_file),
            analysis=_written(request.analysis_file),
            source=str(request.feedback_file),
        )


class CommandApplier(_CommandStep):
    """Edits the worktree; its process writes the apply output file."""

    def __init__(self, config: CommandAdapter, grace_s: float) -> None:
        super().__init__(config, grace_s, "applier", APPLY_PLACEHOLDERS)

    async def apply(self, request: ApplyRequest) -> ApplyOutcome:
        request.output_file.unlink(missing_ok=True)
        values = {
            "case": str(request.case_file),
            "feedback": str(request.feedback_file),
            "worktree": str(request.worktree_dir),
            "output": str(request.output_file),
            "attempt_dir": str(request.attempt_dir),
            "phase": request.phase,
            "attempt": str(request.attempt),
        }
        result = await run_process(self._spec(values, request.log_file, request.worktree_dir))
        return ApplyOutcome(
            exit=_step_exit(result, self._config.timeout_s),
            output=_written(request.output_file),
            source=str(request.output_file),
        )
