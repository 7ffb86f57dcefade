"""The house's layout holds: no import circle, and the layers (core, workers, front ends) import only
downwards. The checker itself is proven on planted imports."""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import circles, import_graph, layer, module_sources, violations

ROOT = Path(__file__).resolve().parent.parent


def test_the_project_has_no_import_circle() -> None:
    """No module of service/ or workers/ imports itself around a circle, lazy imports included."""
    graph = import_graph(module_sources(ROOT))
    assert len(graph) > 100
    assert circles(graph) == []


def test_workers_and_the_core_never_import_a_front_end() -> None:
    """Workers import only the core; the core imports only itself; service never imports workers."""
    graph = import_graph(module_sources(ROOT))
    assert [str(v) for v in violations(graph)] == []


def test_the_layers_are_where_the_docs_say() -> None:
    """The layer of a module follows its package: the goal front end sits inside service.goals."""
    assert layer("service.core.store") == "core"
    assert layer("service.goals.store") == "core"
    assert layer("service.goals.api") == "front"
    assert layer("service.metrics") == "front"
    assert layer("service.client.client") == "service"
    assert layer("workers.loop") == "workers"


def test_a_planted_lazy_import_from_the_core_into_a_front_end_is_caught() -> None:
    """A function-local import of the CLI in a core module is a violation and closes a circle."""
    sources = module_sources(ROOT)
    sources["service.core.keys"] += "\n\ndef planted() -> None:\n    from service.cli.main import main\n"
    graph = import_graph(sources)
    found = [str(v) for v in violations(graph)]
    assert "service.core.keys imports service.cli.main: the core never imports a front end" in found
    assert any("service.core.keys" in circle and "service.cli.main" in circle for circle in circles(graph))


def test_a_planted_type_checking_import_circle_is_caught() -> None:
    """Two front-end modules that import each other, one only under TYPE_CHECKING, are a circle."""
    sources = module_sources(ROOT)
    sources["service.api.http"] += "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import service.api.app\n"
    assert any({"service.api.app", "service.api.http"} <= set(c) for c in circles(import_graph(sources)))


def test_a_planted_worker_import_of_the_client_is_caught() -> None:
    """A worker that reaches past the core (here, into the client) is a violation."""
    sources = module_sources(ROOT)
    sources["workers.loop"] += "\nfrom service.client import TunefleetClient\n"
    found = [str(v) for v in violations(import_graph(sources))]
    assert "workers.loop imports service.client: workers import only the core" in found
