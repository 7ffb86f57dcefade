"""Reading case files (YAML or JSON) with errors that name the file and the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import ValidationError

from service.core.errors import CaseFileError
from service.core.io.documents import load_json, load_yaml
from service.core.models.case import Case
from service.core.validation import WHOLE_FILE, Problem, plain_problems

CASE_SUFFIXES = (".yaml", ".yml", ".json")


def load_case(path: Path) -> Case:
    """The validated case in `path`, or CaseFileError naming the file, the first field and what was
    expected there, then every other problem of the file."""
    case, problems = read_case(path)
    if case is None:
        first, *more = problems
        rest = "".join(f"; field {p.field!r}: {p.text}" for p in more)  # every problem, in one line
        raise CaseFileError(str(path), first.field, first.text + rest)
    return case


def read_case(path: Path) -> tuple[Case | None, list[Problem]]:
    """The case in `path` (None if it is not a valid one) and every problem of it, in plain words."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return None, [Problem("(file)", f"readable file ({exc.strerror})")]
    except UnicodeDecodeError as exc:
        byte = f"byte {exc.start} is {exc.object[exc.start]:#04x}"
        return None, [Problem("(file)", f"UTF-8 text, but it is not UTF-8 text ({byte})")]
    try:
        data = load_json(text) if path.suffix == ".json" else load_yaml(text)
    except (yaml.YAMLError, ValueError) as exc:  # past a bound too (service.core.io.documents)
        kind = "JSON" if path.suffix == ".json" else "YAML"
        return None, [Problem("(file)", f"valid {kind}: {exc}".replace("\n", " "))]
    if not isinstance(data, dict):
        return None, [Problem(WHOLE_FILE, "expected a mapping with id, input and rubric")]
    try:
        return Case.model_validate(data), []
    except ValidationError as exc:
        return None, [Problem(p.field, _expected(p.field, p.text)) for p in plain_problems(exc, Case, data)]


def _expected(field: str, message: str) -> str:
    if (field == "id" or field.endswith(".id")) and "safe slug" not in message:
        return f"a safe slug (lower-case letters, digits, '.', '_', '-'; no path): {message}"
    return message


def case_files(path: Path) -> Iterator[Path]:
    """The case files at `path`: the file itself, or every case file below a folder, sorted; CaseFileError
    when `path` does not exist."""
    if not path.exists():
        raise CaseFileError(
            str(path), "(file)", "an existing case file or folder (there is nothing at this path)"
        )
    if path.is_file():
        yield path
        return
    yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in CASE_SUFFIXES)
