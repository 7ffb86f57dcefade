"""The edits an LLM applier asks for, and how they are made in the worktree: all or none.

Paths are relative to the worktree, in POSIX form; an absolute path, a `..` part, a path into `.git`
or one that resolves outside the worktree (through a link) is refused. An edit replaces text that
must occur exactly once in the file as the edits before it left it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field


class FileEdit(BaseModel):
    """Replace `old`, found exactly once in `file`, by `new`."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1, description="The file's path in the system, as listed.")
    old: str = Field(min_length=1, description="Text that occurs exactly once in the file.")
    new: str = Field(description="What replaces it.")


class NewFile(BaseModel):
    """Create `file` (or replace it whole) with `content`."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1)
    content: str


class EditPlan(BaseModel):
    """What the model answers: the edits to make and the apply output's own fields."""

    model_config = ConfigDict(extra="forbid")

    edits: list[FileEdit] = Field(default_factory=list)
    new_files: list[NewFile] = Field(default_factory=list)
    structural: str | None = Field(default=None, description="A change not to make by yourself.")
    skills: list[str] = Field(default_factory=list, description="Skills the next run should load.")
    summary: str = Field(default="", description="What was changed.")


def resolve(root: Path, name: str) -> Path | str:
    """The path of `name` inside `root`, or why it is refused."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or name.startswith("\\"):
        return "an absolute path is refused: give the path inside the system"
    if ".." in relative.parts:
        return "a path with `..` is refused"
    if not relative.parts or relative.parts[0] == ".git":
        return "not a file of the system"
    path = root / relative
    if not path.resolve().is_relative_to(root.resolve()):
        return "the path leads outside the system"
    if path.is_dir():
        return "a folder, not a file"
    return path


def plan_changes(root: Path, plan: EditPlan) -> tuple[dict[Path, str], list[str]]:
    """The new text of every file the plan touches, and the edits that cannot be made (with why)."""
    texts: dict[Path, str] = {}
    failures: list[str] = []
    for index, edit in enumerate(plan.edits):
        where = f"edits[{index}] ({edit.file})"
        path = resolve(root, edit.file)
        if isinstance(path, str):
            failures.append(f"{where}: {path}")
            continue
        if path not in texts:
            if not path.is_file():
                failures.append(f"{where}: no such file (create it with new_files)")
                continue
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                failures.append(f"{where}: cannot be read as text: {exc}")
                continue
        found = texts[path].count(edit.old)
        if found != 1:
            failures.append(f"{where}: the old text {edit.old[:80]!r} occurs {found} times, not exactly once")
            continue
        texts[path] = texts[path].replace(edit.old, edit.new, 1)
    for index, new_file in enumerate(plan.new_files):
        path = resolve(root, new_file.file)
        if isinstance(path, str):
            failures.append(f"new_files[{index}] ({new_file.file}): {path}")
            continue
        texts[path] = new_file.content
    return texts, failures


def write_changes(texts: dict[Path, str]) -> None:
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
