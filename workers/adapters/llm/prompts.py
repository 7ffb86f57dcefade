"""The prompt templates of the LLM steps, and the bounded views of folders that go into them.

A template is a `string.Template` (`$name` or `${name}`; a literal dollar is `$$`). The package ships
`prompts/analyze.md`, `prompts/apply.md` and `prompts/run.md`; a tuning may name its own
(`prompts.analyze`, `prompts.apply`, `prompts.run`), which may use the same names. A template that
cannot be read or names an unknown placeholder is a ConfigError when the adapter is built, before
any case runs.
"""

from __future__ import annotations

import json
import os
import string
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from service.core.errors import ConfigError

PromptStep = Literal["analyze", "apply", "run"]

ANALYZE_NAMES = frozenset(
    {
        "case_id",
        "case_input",
        "rubric",
        "phase",
        "attempt",
        "run_answer",
        "run_error",
        "run_void",
        "run_timed_out",
        "run_log_tail",
        "run_record",
        "missed_skills",
        "earlier",
        "workspace",
        "system",
        "schema",
    }
)
APPLY_NAMES = frozenset(
    {"case_id", "phase", "attempt", "improvements", "summary", "files", "schema", "budget"}
)
RUN_NAMES = frozenset({"task_input", "system", "memory", "expected_skills"})
"""The runner's: never anything of the case but its task's input (no rubric)."""
NAMES: dict[PromptStep, frozenset[str]] = {"analyze": ANALYZE_NAMES, "apply": APPLY_NAMES, "run": RUN_NAMES}

LISTING_ENTRIES_MAX = 200
"""Files named in a listing of the run's workspace."""
EXCERPT_FILES_MAX = 5
"""Text files of the workspace quoted."""
EXCERPT_BYTES = 4000
"""Bytes quoted of each."""
SYSTEM_BYTES_MAX = 200_000
"""Bytes of the system's text files quoted in all (the analyzer reads them, the applier edits them, the
runner follows them)."""
MEMORY_BYTES_MAX = 50_000
"""Bytes of the memory's text files quoted in all (the runner's prompt)."""


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON Schema as a prompt quotes it: on one line (indentation would cost tokens, not clarity)."""
    return json.dumps(schema, separators=(", ", ": "))


def load_template(step: PromptStep, path: Path | None) -> string.Template:
    """The step's template: the tuning's own file, else the one shipped in the package."""
    if path is None:
        text = (
            resources.files(__package__ or "workers.adapters.llm").joinpath(f"prompts/{step}.md").read_text()
        )
        where = f"the built-in {step} prompt"
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"prompts.{step}: {path}: cannot read: {exc}") from exc
        where = f"prompts.{step}: {path}"
    template = string.Template(text)
    if not template.is_valid():
        raise ConfigError(f"{where}: a `$` that names nothing (write a literal dollar as $$)")
    unknown = sorted(set(template.get_identifiers()) - NAMES[step])
    if unknown:
        raise ConfigError(
            f"{where}: unknown placeholder ${unknown[0]}; known: {', '.join(sorted(NAMES[step]))}"
        )
    return template


def _files(root: Path) -> list[Path]:
    """Every regular file below `root` (not following links, skipping `.git`), sorted; at most one
    more than LISTING_ENTRIES_MAX so that the caller knows the listing was cut."""
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
                if len(found) > LISTING_ENTRIES_MAX:
                    return found
    return found


def _text(path: Path, limit: int) -> str | None:
    """The first `limit` bytes of a file as text; None for a binary or unreadable file."""
    try:
        with path.open("rb") as handle:
            head = handle.read(limit)
    except OSError:
        return None
    if b"\0" in head:
        return None
    return head.decode("utf-8", errors="replace")


def workspace_view(root: Path) -> str:
    """The run's workspace: names and sizes (at most LISTING_ENTRIES_MAX), and the first
    EXCERPT_BYTES of up to EXCERPT_FILES_MAX text files."""
    if not root.is_dir():
        return "(the run left no workspace)"
    files = _files(root)
    if not files:
        return "(empty)"
    shown = files[:LISTING_ENTRIES_MAX]
    lines = [f"- `{p.relative_to(root)}` ({p.stat().st_size} bytes)" for p in shown]
    if len(files) > LISTING_ENTRIES_MAX:
        lines.append(f"- … (the listing stops at {LISTING_ENTRIES_MAX} files)")
    excerpts: list[str] = []
    for path in shown:
        if len(excerpts) == EXCERPT_FILES_MAX:
            break
        text = _text(path, EXCERPT_BYTES)
        if text is None:
            continue
        cut = " (its start)" if path.stat().st_size > EXCERPT_BYTES else ""
        excerpts.append(f"### `{path.relative_to(root)}`{cut}\n\n~~~~\n{text}\n~~~~")
    return "\n".join(lines) + ("\n\n" + "\n\n".join(excerpts) if excerpts else "")


def tree_view(root: Path) -> str:
    """A system folder's text files, whole, up to SYSTEM_BYTES_MAX in all; the rest only named."""
    return shown_tree(root, SYSTEM_BYTES_MAX)[0]


def shown_tree(root: Path, budget: int) -> tuple[str, list[Path]]:
    """A folder's text files, whole, up to `budget` bytes in all (the rest only named), and the paths
    (relative to `root`) of those shown whole."""
    files = _files(root)
    parts: list[str] = []
    shown: list[Path] = []
    for path in files[:LISTING_ENTRIES_MAX]:
        name = path.relative_to(root)
        size = path.stat().st_size
        text = _text(path, size + 1) if size <= budget else None
        if text is None:
            parts.append(f"### `{name}` ({size} bytes, not shown)")
            continue
        budget -= size
        shown.append(name)
        parts.append(f"### `{name}`\n\n~~~~\n{text}\n~~~~")
    if len(files) > LISTING_ENTRIES_MAX:
        parts.append(f"(the listing stops at {LISTING_ENTRIES_MAX} files)")
    return "\n\n".join(parts) or "(no files)", shown
