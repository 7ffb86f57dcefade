"""Parsing YAML and JSON documents the fleet did not write (case files, goal specs, tuning files, the
settings file, request bodies), with bounds checked while parsing, before anything is built.

A file's size bounds its text, not what the text expands to. YAML aliases can repeat a node many
times: ten levels of nine aliases make 9^10 nodes from a few hundred bytes, which validating expands
into gigabytes (issue 54). And a few kilobytes of nested brackets recurse past Python's stack. So:

- **aliases are allowed, their expansion is bounded**: the example tunings share an adapter between
  roles with `&model` / `*model`, which is worth keeping; but every alias adds the nodes of what it
  names, and a document whose aliases add more than ALIAS_NODES_MAX nodes in all is refused, as is
  an alias to a node that contains it (a recursive document);
- **nesting is bounded**: a YAML document nested deeper than DEPTH_MAX levels is refused, and JSON is
  parsed by pydantic-core, which refuses nesting past its own limit (200 levels) with a ValueError.

Either refusal is one line (a yaml.YAMLError, or a ValueError for JSON) that the callers report with
the file's name, like any other syntax error.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

ALIAS_NODES_MAX = 10_000
"""The most nodes that a document's aliases may add in all (an adapter shared by three roles adds a
few dozen)."""
DEPTH_MAX = 100
"""The deepest nesting of a YAML document (a case or a tuning needs fewer than ten levels)."""


class DocumentBoundError(yaml.YAMLError):
    """A YAML document past one of the bounds above."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, which counts what aliases add and how deep nodes nest while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}
        """id(node) -> the nodes it holds once every alias in it is expanded (itself included)."""
        self._alias_nodes = 0
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]
            named = self.anchors.get(anchor)
            if named is not None:
                self._count_alias(anchor, named)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > DEPTH_MAX:
            raise DocumentBoundError(f"nested deeper than {DEPTH_MAX} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._sizes[id(node)] = 1 + sum(self._sizes.get(id(child), 1) for child in _children(node))
        return node

    def _count_alias(self, anchor: str, named: Node) -> None:
        size = self._sizes.get(id(named))
        if size is None:  # still being composed: the alias is inside what it names
            raise DocumentBoundError(f"alias *{anchor} is inside the node it names (a recursive document)")
        self._alias_nodes += size
        if self._alias_nodes > ALIAS_NODES_MAX:
            raise DocumentBoundError(
                f"its aliases expand to more than {ALIAS_NODES_MAX} nodes (at alias *{anchor}); "
                "write the repeated parts out or use fewer aliases"
            )


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str) -> Any:
    """The document in `text`, like yaml.safe_load; yaml.YAMLError past a bound (a DocumentBoundError)."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def one_line(error: Exception) -> str:
    """A parser's error as one line (PyYAML's name the line and column on lines of their own)."""
    return " ".join(str(error).split())


def load_json(text: str | bytes) -> Any:
    """The JSON document in `text`; ValueError naming the line and column when it is not valid JSON or
    is nested too deep."""
    return pydantic_core.from_json(text)
