"""What is wrong with input that failed validation, said one way everywhere: the source (a file, a
body), each field by its dotted path, and what was expected there.

Every reader of user or agent input words a pydantic `ValidationError` through `field_problems`:
as one line (`describe_validation`), one `error:` line per setting (service.core.startup), one
field of a case file (service.kinds.cases.files) or the field list of an HTTP 422 (service.api.http).

The files a person writes (a tuning file, a case file: `tunefleet check`, the loaders) go further, through
`plain_problems`: every problem at once, in that person's words (`Value error, …`, `Extra inputs are not
permitted` and `(top level)` never reach them), with "did you mean" for a key that is a near miss of a
known one. A model validator that finds several problems raises `FieldErrors`, spread back into one
problem per field.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from service.core.models.case import SLUG_PATTERN

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


WHOLE_FILE = "(the whole file)"
"""The field of a problem with the file as a whole (no key of it)."""


class Problem(NamedTuple):
    field: str
    """The field's path as the user writes it (`runner.argv[9]`, `rubric.0.id`), or WHOLE_FILE."""
    text: str
    """What is wrong there, in one plain sentence."""


class FieldErrors(ValueError):
    """Several problems a model validator found, each with the field it is about (its path below the
    validated model)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = [Problem(field, text) for field, text in problems]
        super().__init__("; ".join(f"{p.field}: {p.text}" for p in self.problems))


def plain_problems(exc: ValidationError, model: type[BaseModel], data: object) -> list[Problem]:
    """Every problem of `exc` (raised validating `data` as `model`) as a Problem, in order."""
    found: list[Problem] = []
    for error in exc.errors():
        path, parent = _walk(model, error["loc"])
        found += _problems(error, path, parent, _value_at(data, error["loc"][:-1]))
    return found


def join_problems(problems: Sequence[Problem]) -> str:
    """The problems as one line: `field 'a.b': text; field 'c': text`."""
    return "; ".join(f"field {p.field!r}: {p.text}" for p in problems)


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """`; did you mean 'x'?` for the closest of `known` to `word`, or the known words when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(sorted(known))}" if known else ""


def _problems(
    error: ErrorDetails, path: str, parent: type[BaseModel] | None, around: object
) -> list[Problem]:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    loc = error["loc"]
    last = str(loc[-1]) if loc else ""
    known = list(parent.model_fields) if parent is not None else []
    if kind == "extra_forbidden":
        return [Problem(path, "unknown key" + did_you_mean(last, known))]
    if kind == "missing":
        near = [k for k in (around if isinstance(around, dict) else {}) if k not in known]
        hint = difflib.get_close_matches(last, [str(k) for k in near], n=1, cutoff=0.6)
        return [Problem(path, "missing (required)" + (f"; is {hint[0]!r} meant to be it?" if hint else ""))]
    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        if isinstance(cause, FieldErrors):
            prefix = f"{path}." if path != WHOLE_FILE else ""
            return [Problem(prefix + p.field, p.text) for p in cause.problems]
        return [Problem(path, str(cause) if cause is not None else error["msg"])]
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        tag = str(ctx.get("tag"))
        return [Problem(f"{path}.kind", f"{tag!r} is not a kind of agent" + did_you_mean(tag, tags))]
    if kind == "union_tag_not_found":
        return [Problem(f"{path}.kind", "missing: say which kind of agent (command, llm or demo)")]
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == SLUG_PATTERN:
        what = f"a safe slug (lower-case letters, digits, '.', '_', '-'; no path: {SLUG_PATTERN})"
        return [Problem(path, f"expected {what}, not {given!r}")]
    return [Problem(path, _words(error["msg"], given))]


def _words(message: str, given: object) -> str:
    """pydantic's sentence about a value, said plainly, with the value given when it is short."""
    text = message
    for theirs, ours in (("Input should be ", "expected "), ("Input should have ", "expected ")):
        if text.startswith(theirs):
            text = ours + text[len(theirs) :]
    text = text.replace("String should have", "expected text with").replace("List should have", "expected")
    for theirs, ours in (
        ("greater than or equal to", "at least"),
        ("less than or equal to", "at most"),
        ("greater than", "more than"),
    ):
        text = text.replace(theirs, ours)
    text = text.split(", unable to ")[0]
    text = text[:1].lower() + text[1:]
    shown = repr(given)
    if isinstance(given, str | int | float | bool) and len(shown) <= 60 and "not " not in text:
        text += f", not {shown}"
    return text


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, type[BaseModel] | None]:
    """The path of `loc` as the user writes it, and the model that holds its last key (None when the
    last key is not a model's)."""
    parts: list[str] = []
    current: Any = model
    parent: type[BaseModel] | None = model
    index = 0
    while index < len(loc):
        key = loc[index]
        index += 1
        parent = current if _is_model(current) else None
        parts.append(str(key))
        current = _child(current, key)
        members = [m for m in _models_in(current)]
        if len(members) > 1 and index < len(loc):
            tag = loc[index]
            chosen = [m for m in members if _kind_of(m) == tag]
            if chosen:  # a discriminated union: the tag is pydantic's, not a key of the file
                current = chosen[0]
                index += 1
        elif len(members) == 1:
            current = members[0]
    return (".".join(parts) or WHOLE_FILE), (parent if loc else None)


def _child(current: Any, key: int | str) -> Any:
    """The annotation one key below `current` (a model's field, a list's item, a mapping's value)."""
    if _is_model(current) and isinstance(key, str):
        field = current.model_fields.get(key)
        return field.annotation if field is not None else None
    args = [a for a in typing.get_args(current) if a is not type(None)]
    origin = typing.get_origin(current)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return current if _models_in(current) else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation may hold (a model, an optional one, the members of a union)."""
    if _is_model(annotation):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    return []


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _kind_of(model: type[BaseModel]) -> object:
    field = model.model_fields.get("kind")
    return field.default if field is not None else None


def _value_at(data: object, loc: tuple[int | str, ...]) -> object:
    """What the user wrote at `loc` (None where there is nothing; a discriminator's tag is skipped)."""
    for key in loc:
        if isinstance(data, dict):
            if key in data:
                data = data[key]
            elif not (isinstance(key, str) and data.get("kind") == key):
                return None
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data
