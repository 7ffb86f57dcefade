"""The runner as a single prompt to a model behind an OpenAI-compatible Chat Completions API.

One call per run: the prompt (`prompts/run.md`) holds the system version's text files, the memory's,
the task's input (nothing else of the case: never its rubric) and the skills the run is expected to
use; the model's plain-text answer is the run's answer. The runner writes no memory and no workspace.
"""

from __future__ import annotations

import time
from pathlib import Path

from service.core.io.files import append_line
from service.core.models.records import RunOutput, Usage
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import RunOutcome, RunRequest
from workers.adapters.llm.errors import (
    CallTimedOut,
    LlmStepError,
)
from workers.adapters.llm.pool import Providers, borrowed
from workers.adapters.llm.prompts import MEMORY_BYTES_MAX, SYSTEM_BYTES_MAX, load_template, shown_tree
from workers.adapters.llm.provider import check_limits
from workers.adapters.llm.session import Message, Session

SKILLS_DIR = Path("skills")


def skill_names(shown: list[Path]) -> list[str]:
    """The skills among the files put in the prompt: `skills/<name>.md`."""
    return [path.stem for path in shown if path.parent == SKILLS_DIR and path.suffix == ".md"]


def prompt_values(request: RunRequest) -> tuple[dict[str, str], list[str]]:
    """The template's values, and the names of the skills whose files they quote whole."""
    system, shown = shown_tree(request.system_dir, SYSTEM_BYTES_MAX)
    memory = (
        shown_tree(request.memory_dir, MEMORY_BYTES_MAX)[0]
        if request.memory_dir.is_dir() and any(request.memory_dir.iterdir())
        else "(empty: no earlier work)"
    )
    values = {
        "task_input": request.task.input,
        "system": system,
        "memory": memory,
        "expected_skills": ", ".join(request.expected_skills) or "(none in particular)",
    }
    return values, skill_names(shown)


def _spent(session: Session | None) -> Usage | None:
    return session.meter.usage() if session is not None else None


def _no_run(request: RunRequest, started: float, session: Session | None, exc: LlmStepError) -> RunOutcome:
    """A run the step error ended before it counted (see workers.adapters.llm.errors): a void one, or
    none at all (the provider down, a refused key), with what its calls cost."""
    void = exc.ends_as == "void"
    append_line(request.log_file, f"llm: the run is void: {exc}" if void else f"llm: no run: {exc}")
    spent = None if void else _spent(session)
    return RunOutcome(exit_code=1, duration_ms=_elapsed_ms(started), spent=spent, **{exc.ends_as: str(exc)})


def _elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


class LlmRunner:
    """Runs a case as one prompt to a model and reports its plain-text answer with the measured usage.

    The provider down through its retries is no run (the case is handed back, as for the meta agent),
    a refused key holds the tuning, a missing key variable makes the run void (infrastructure: the loop
    sets it aside and runs the try again); another refusal of the request (a 4xx) or an unreadable
    answer is the run's error, graded as such; a call that timed out `timeouts_max` times while the
    provider answered others is a run that timed out, graded as a command runner's would be.
    """

    def __init__(self, config: LlmAdapter, providers: Providers | None = None) -> None:
        check_limits(config, providers.redis if providers is not None else None)
        self._config = config
        self._providers = providers
        self._template = load_template("run", config.prompts.get("run"))

    async def run(self, request: RunRequest) -> RunOutcome:
        started = time.monotonic()
        session: Session | None = None
        try:
            async with borrowed(self._providers) as pool:
                provider = pool.get(self._config)
                session = Session(self._config, provider, request.step_dir, request.log_file)
                values, skills = prompt_values(request)
                messages: list[Message] = [{"role": "user", "content": self._template.substitute(values)}]
                answer = await session.ask(messages)
        except LlmStepError as exc:
            if exc.ends_as != "error":
                return _no_run(request, started, session, exc)
            usage = session.meter.usage() if session is not None else Usage(source="api")
            output = RunOutput(error=str(exc), usage=usage)
            timed_out = isinstance(exc, CallTimedOut)
            return RunOutcome(
                exit_code=1, duration_ms=_elapsed_ms(started), output=output, timed_out=timed_out
            )
        output = RunOutput(answer=answer, turns=1, skills_loaded=skills, usage=session.meter.usage())
        return RunOutcome(exit_code=0, duration_ms=_elapsed_ms(started), output=output)
