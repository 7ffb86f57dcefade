"""The project's import graph, read from the source (every import statement, at any depth: inside
functions and `if TYPE_CHECKING:` blocks too, so a lazy import cannot hide a circle), and the layering
rules it must keep: no circle; workers and the core never import a front end; the core imports only
the core; nothing in `service` imports `workers`."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FRONT_ENDS = (
    "service.api",
    "service.cli",
    "service.watch",
    "service.metrics",
    "service.metric_families",
    "service.goals.api",
    "service.goals.cli",
    "service.goals.metrics",
    "service.goals.demo",
    "service.evals.api",
    "service.evals.cli",
    "service.evals.metrics",
    "service.evals.render",
)
"""The front ends: what people and the daemon use (CLI, HTTP API and dashboard, watch, metrics)."""
CORE = ("service.core", "service.goals", "service.evals", "service.gate")
"""The core: what workers and front ends share (service.goals and service.evals minus their front-end
modules above)."""


def _within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> str:
    """`front`, `core`, `workers` or `service` (the client and the daemon, between core and front ends)."""
    if _within(module, FRONT_ENDS):
        return "front"
    if _within(module, CORE):
        return "core"
    if _within(module, ("workers",)):
        return "workers"
    return "service"


def module_sources(root: Path, packages: Iterable[str] = ("service", "workers")) -> dict[str, str]:
    """Every module of `packages` under `root`, by dotted name, with its source."""
    sources: dict[str, str] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            sources[".".join(parts)] = path.read_text()
    return sources


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the deepest module each import statement names)."""
    graph: dict[str, set[str]] = {}
    for module, text in sources.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(text, filename=module)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # the house writes absolute imports only: a relative one is read as a circle
                    targets.add(module)
                    continue
                base = node.module or ""
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
                names = [n if n in sources else base for n in names]
            else:
                continue
            targets.update(_deepest(name, sources) for name in names if _deepest(name, sources))
        graph[module] = targets
    return graph


def _deepest(name: str, sources: Mapping[str, str]) -> str:
    parts = name.split(".")
    while parts and ".".join(parts) not in sources:
        parts.pop()
    return ".".join(parts)


def _reach(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module that `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other, directly or around a circle (a module that
    reaches itself, with all the modules it reaches that reach it back)."""
    reach = {module: _reach(graph, module) for module in graph}
    found: list[list[str]] = []
    for module in sorted(graph):
        if module in reach[module]:
            circle = sorted(m for m in reach[module] if module in reach.get(m, set()))
            if circle not in found:
                found.append(circle)
    return found


@dataclass(frozen=True)
class Violation:
    importer: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.importer} imports {self.imported}: {self.rule}"


def violations(graph: Mapping[str, set[str]]) -> list[Violation]:
    """Every import that breaks the layering."""
    found: list[Violation] = []
    for importer, imported in sorted(graph.items()):
        source = layer(importer)
        for target in sorted(imported):
            kind = layer(target)
            if source in ("core", "workers") and kind == "front":
                found.append(Violation(importer, target, f"the {source} never imports a front end"))
            elif source == "core" and kind in ("service", "workers"):
                found.append(Violation(importer, target, "the core imports only the core"))
            elif importer.startswith("service") and kind == "workers":
                found.append(Violation(importer, target, "service never imports workers"))
            elif source == "workers" and kind == "service":
                found.append(Violation(importer, target, "workers import only the core"))
    return found
