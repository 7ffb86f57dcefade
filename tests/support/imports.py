"""The project's import graph, read from the source (every import statement, at any depth: inside
functions and `if TYPE_CHECKING:` blocks too, so a lazy import cannot hide a circle), and the layering
rules it must keep (RULES), each module's layer read from its folder (`layer`): no circle; the core imports
only the core, never a kind; a kind never imports a front end; nothing in `service` imports `workers`."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FRONT_FOLDERS = ("api", "cli", "watch", "dashboard")
"""The folders of `service/` that are front ends: what people and the daemon use."""
FRONT_FILES = ("api", "cli", "metrics", "metric_families", "render", "demo")
"""The modules that are a front end wherever they sit: `service/metrics.py` beside the folders above, and
in a kind's slice (`service/kinds/<kind>/`) its HTTP routes, commands, metrics and renderings."""
MIDDLE_FOLDERS = ("client", "daemon")
"""The folders of `service/` between the front ends and the core: the client and the daemon."""


def layer(module: str) -> str:
    """`front`, `core`, `kind`, `middle` (the client and the daemon) or `workers`, read from the module's
    folder: `service/core/` is the core, `service/kinds/<kind>/` a kind (its front-end files aside),
    `service/{client,daemon}/` the middle, the rest of `service/` front ends, `workers/` the workers."""
    parts = module.split(".")
    if parts[0] == "workers":
        return "workers"
    if parts[-1] in FRONT_FILES or (len(parts) > 1 and parts[1] in FRONT_FOLDERS):
        return "front"
    if len(parts) > 1 and parts[1] == "core":
        return "core"
    if len(parts) > 1 and parts[1] == "kinds":
        return "kind"
    if len(parts) > 1 and parts[1] in MIDDLE_FOLDERS:
        return "middle"
    return "front"


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


RULES: dict[str, tuple[str, ...]] = {
    "core": ("core",),
    "kind": ("core", "kind"),
    "workers": ("core", "kind", "workers"),
    "middle": ("core", "kind", "middle", "front"),
    "front": ("core", "kind", "middle", "front"),
}
"""What each layer may import: the core only itself; a kind the core and the kinds (never a front end,
the client or the daemon); workers the core and the kinds; the daemon serves the front ends; service
never imports the workers."""


def violations(graph: Mapping[str, set[str]]) -> list[Violation]:
    """Every import that breaks the layering (RULES)."""
    found: list[Violation] = []
    for importer, imported in sorted(graph.items()):
        source = layer(importer)
        for target in sorted(imported):
            kind = layer(target)
            if kind not in RULES[source]:
                found.append(
                    Violation(importer, target, f"the {source} layer never imports the {kind} layer")
                )
    return found
