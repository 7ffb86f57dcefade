"""Reading case files (YAML or JSON) with errors that name the file and the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import ValidationError

from service.core.errors import CaseFileError
from service.core.models.case import Case

CASE_SUFFIXES = (".yaml", ".yml", ".json")


def load_case(path: Path) -> Case:
    """The validated case in `path`, or CaseFileError naming the file, the field and what was expected."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CaseFileError(str(path), "(file)", f"readable file ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise CaseFileError(
            str(path),
            "(file)",
            f"UTF-8 text, but it is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise CaseFileError(str(path), "(file)", f"valid {kind}: {exc}".replace("\n", " ")) from exc
    if not isinstance(data, dict):
        raise CaseFileError(str(path), "(top level)", "a mapping with id, input and rubric")
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CaseFileError(str(path), where, _expected(where, first["msg"])) from exc


def _expected(field: str, message: str) -> str:
    if field == "id" or field.endswith(".id"):
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
