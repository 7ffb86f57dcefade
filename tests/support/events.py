"""Reading the event contract out of the source: the kinds every emit site names, the sites that name a
kind outside `EventKind`, and kinds matched by string literal (in Python or in the dashboard's
JavaScript) instead of through the contract."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from service.core.models import events as contract
from service.core.models.events import EventKind

EMITTERS = frozenset({"emit", "emit_many", "event"})
"""The methods that write an event: EventSink.emit/emit_many, and the per-job helpers that call them."""
END_MAPS: dict[str, list[EventKind]] = {
    "CASE_ENDS": list(contract.CASE_ENDS.values()),
    "GOAL_ENDS": list(contract.GOAL_ENDS.values()),
}
KIND_VALUES = frozenset(kind.value for kind in EventKind)


def _kind_params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The function's parameters typed `EventKind` (a kind passed through, checked by mypy)."""
    params = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    return {p.arg for p in params if p.annotation is not None and ast.unparse(p.annotation) == "EventKind"}


def _kinds_named(node: ast.expr, passed: set[str]) -> set[str] | None:
    """The kinds an emit site's first argument can be; None if it names one outside the contract."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "EventKind":
        return {EventKind[node.attr].value} if node.attr in EventKind.__members__ else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in END_MAPS:
        return {kind.value for kind in END_MAPS[node.value.id]}
    if isinstance(node, ast.Name) and node.id in passed:
        return set()
    return None


def emit_sites(sources: Mapping[str, str]) -> tuple[set[str], list[str]]:
    """Every kind the emit sites of `sources` (module name to text) name, and the sites (`module:line:
    argument`) whose kind is not a member of EventKind (a string, an f-string, an unknown member)."""
    named: set[str] = set()
    outside: list[str] = []

    def visit(node: ast.AST, module: str, passed: set[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            passed = passed | _kind_params(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EMITTERS:
            keyword = next((k.value for k in node.keywords if k.arg == "kind"), None)
            given = node.args[0] if node.args else keyword
            if given is not None:
                kinds = _kinds_named(given, passed)
                if kinds is None:
                    outside.append(f"{module}:{node.lineno}: {ast.unparse(given)}")
                else:
                    named.update(kinds)
        for child in ast.iter_child_nodes(node):
            visit(child, module, passed)

    for module, text in sorted(sources.items()):
        visit(ast.parse(text), module, set())
    return named, outside


def _kind_strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in KIND_VALUES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for element in node.elts for s in _kind_strings(element)]
    return []


def kind_literals(sources: Mapping[str, str]) -> list[str]:
    """Kinds matched by string literal: compared (`==`, `in`), or the keys of a table of kinds (a mapping
    of two or more keys, all kinds)."""
    found: list[str] = []
    for module, text in sorted(sources.items()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict) and len(node.keys) > 1:  # a table of kinds, not one result
                keys = [key for key in node.keys if key is not None]
                operands = keys if all(_kind_strings(key) for key in keys) else []
            else:
                continue
            found += [f"{module}:{node.lineno}: {s!r}" for o in operands for s in _kind_strings(o)]
    return found


JS_STRING = re.compile(r"""(["'`])([a-z][a-z0-9_]*)\1""")


def js_kind_literals(text: str) -> list[str]:
    """The quoted strings of a JavaScript text that are event kinds."""
    return [match.group(2) for match in JS_STRING.finditer(text) if match.group(2) in KIND_VALUES]
