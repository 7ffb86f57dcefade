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


def test_every_import_keeps_the_layers() -> None:
    """The core imports only itself (no kind), a kind no front end, workers only the core and the kinds,
    and service never imports workers."""
    graph = import_graph(module_sources(ROOT))
    assert [str(v) for v in violations(graph)] == []


def test_the_layers_are_read_from_the_folders() -> None:
    """The layer of a module follows its folder: a kind's front-end files are front ends, the rest of its
    slice is the kind's, and a new kind's folder needs no entry anywhere."""
    assert layer("service.core.store") == "core"
    assert layer("service.core.io.batch") == "core"
    assert layer("service.kinds.goals.store") == "kind"
    assert layer("service.kinds.fourth.models") == "kind"
    assert layer("service.kinds.goals.api") == "front"
    assert layer("service.kinds.evals.gate.report") == "kind"
    assert layer("service.metrics") == "front"
    assert layer("service.client.client") == "middle"
    assert layer("workers.kinds.cases.loop") == "workers"


def test_a_planted_import_from_the_core_into_a_kind_is_caught() -> None:
    """A core module that imports a kind's module breaks the layers: the core serves the kinds through its
    registries and never names one."""
    sources = module_sources(ROOT)
    sources["service.core.keys"] += "\n\nfrom service.kinds.goals.store import GoalStore\n"
    found = [str(v) for v in violations(import_graph(sources))]
    assert (
        "service.core.keys imports service.kinds.goals.store: the core layer never imports the kind layer"
        in found
    )


def test_a_planted_lazy_import_from_the_core_into_a_front_end_is_caught() -> None:
    """A function-local import of the CLI in a core module is a violation and closes a circle."""
    sources = module_sources(ROOT)
    sources["service.core.keys"] += "\n\ndef planted() -> None:\n    from service.cli.main import main\n"
    graph = import_graph(sources)
    found = [str(v) for v in violations(graph)]
    assert "service.core.keys imports service.cli.main: the core layer never imports the front layer" in found
    assert any("service.core.keys" in circle and "service.cli.main" in circle for circle in circles(graph))


def test_a_planted_type_checking_import_circle_is_caught() -> None:
    """Two front-end modules that import each other, one only under TYPE_CHECKING, are a circle."""
    sources = module_sources(ROOT)
    planted = "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import service.api.app\n"
    sources["service.api.http"] += planted
    assert any({"service.api.app", "service.api.http"} <= set(c) for c in circles(import_graph(sources)))


def test_a_planted_worker_import_of_the_client_is_caught() -> None:
    """A worker that reaches past the core (here, into the client) is a violation."""
    sources = module_sources(ROOT)
    sources["workers.kinds.cases.loop"] += "\nfrom service.client import TunefleetClient\n"
    found = [str(v) for v in violations(import_graph(sources))]
    assert (
        "workers.kinds.cases.loop imports service.client: the workers layer never imports the middle layer"
        in found
    )
