"""Reading the event contract out of the source: the kinds the producers (the core, the client, the
daemon, the workers) name, the places that name a kind outside `EventKind`, and kinds matched by string
literal (in Python or in the dashboard's JavaScript) instead of through the contract."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from service.core.models.events import CASE_ENDS, EventKind
from service.kinds.goals.models import GOAL_ENDS
from tests.support.imports import layer

CONTRACT = "service.core.models.events"
EMITTERS = frozenset({"emit", "emit_many", "event", "record", "let_go"})
"""Methods that take a kind first: EventSink.emit/emit_many and the per-job helpers that call them."""
END_MAPS: dict[str, list[EventKind]] = {
    "CASE_ENDS": list(CASE_ENDS.values()),
    "GOAL_ENDS": list(GOAL_ENDS.values()),
}
KIND_VALUES = frozenset(kind.value for kind in EventKind)


def _by_text(node: ast.expr) -> bool:
    """A kind made of text: a string, an f-string, or text put together."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.JoinedStr | ast.BinOp)


def emit_sites(sources: Mapping[str, str]) -> tuple[set[str], list[str]]:
    """The kinds that the producers in `sources` (module name to text) name, through an `EventKind`
    member or a case's or goal's end; and the places (`module:line: expression`) that name a kind
    outside the contract: a member the enum lacks, or an emit call given text for its kind."""
    named: set[str] = set()
    outside: list[str] = []
    for module, text in sorted(sources.items()):
        producer = module != CONTRACT and layer(module) != "front"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "EventKind":
                    if node.attr not in EventKind.__members__:
                        outside.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
                    elif producer:
                        named.add(EventKind[node.attr].value)
            elif isinstance(node, ast.Name) and node.id in END_MAPS and producer:
                named |= {kind.value for kind in END_MAPS[node.id]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                keyword = next((k.value for k in node.keywords if k.arg == "kind"), None)
                given = node.args[0] if node.args else keyword
                if node.func.attr in EMITTERS and given is not None and _by_text(given):
                    outside.append(f"{module}:{node.lineno}: {ast.unparse(given)}")
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
