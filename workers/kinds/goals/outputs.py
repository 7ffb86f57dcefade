"""Reading what a goal step's agent left in its `out/` folder: never through a link, never more than
MAX_OUTPUT_BYTES, validated against the models the fleet keeps."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from service.core.validation import describe_validation, valid_only
from service.kinds.goals.state import ProgressEntry, WorkerResult
from workers.adapters.folder import StepFolder, read_agent_file
from workers.adapters.goal_base import WORK_RESULT

MAX_OUTPUT_BYTES = 4 * 1024 * 1024
"""The most the fleet keeps of one goal agent output file (a larger one is refused by name)."""


def read_output(path: Path) -> str | None:
    """An agent's output file as text; None when it wrote none; ValueError (AgentFileRefused) when it is
    too large, not a regular file, or a symbolic link (workers.adapters.folder.read_agent_file)."""
    data = read_agent_file(path, MAX_OUTPUT_BYTES)
    return None if data is None else data.decode("utf-8", errors="replace")


def worker_result(folder: StepFolder, exit_words: str) -> WorkerResult:
    """The worker result the agent wrote, or a failed one saying what is wrong with it."""
    path = folder.outputs / WORK_RESULT
    try:
        text = read_output(path)
        if text is None:
            return WorkerResult(status="failed", summary=f"the worker wrote no {WORK_RESULT}{exit_words}")
        return WorkerResult.model_validate_json(text)
    except ValueError as exc:
        why = describe_validation(exc) if isinstance(exc, ValidationError) else str(exc)
        return WorkerResult(status="failed", summary=f"{WORK_RESULT} is invalid: {why}")


def read_or_none(path: Path) -> str | None:
    """`read_output`, with None for a file the fleet does not keep (a link, too large)."""
    try:
        return read_output(path)
    except ValueError:
        return None


def progress_entries(text: str) -> list[ProgressEntry]:
    """The valid lines of a progress log (an invalid line is skipped: it is the agent's to get right)."""
    return valid_only(ProgressEntry, text.splitlines())
