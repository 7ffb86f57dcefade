"""What is wrong with input that failed validation, said one way everywhere: the source (a file, a
body), each field by its dotted path, and what was expected there.

Every reader of user or agent input words a pydantic `ValidationError` through `field_problems`:
as one line (`describe_validation`), one `error:` line per setting (service.core.startup), one
field of a case file (service.core.cases) or the field list of an HTTP 422 (service.api.http).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

TOP_LEVEL = "(top level)"


class FieldProblem(NamedTuple):
    field: str
    """The field's dotted path (`rubric.0.id`), or the name given for the whole input."""
    expected: str
    """What was expected there, as pydantic words it."""


def field_problems(exc: ValidationError, top: str = TOP_LEVEL) -> list[FieldProblem]:
    """Each problem of `exc`, in order; `top` names the whole input (a problem with no field)."""
    return [FieldProblem(".".join(str(p) for p in e["loc"]) or top, e["msg"]) for e in exc.errors()]


def describe_validation(exc: ValidationError, source: str | Path | None = None) -> str:
    """One line: `<source>: field 'a.b': what was expected; field 'c': …` (no prefix without a source)."""
    problems = "; ".join(f"field {p.field!r}: {p.expected}" for p in field_problems(exc))
    return problems if source is None else f"{source}: {problems}"


def valid_only(model: type[M], values: Iterable[str | bytes]) -> list[M]:
    """Each of `values` (JSON) that validates as `model`, in order; one that does not is left out (a
    torn last line of a log, an entry an agent or another version wrote wrong)."""
    found = []
    for value in values:
        try:
            found.append(model.model_validate_json(value))
        except ValidationError:
            continue
    return found
