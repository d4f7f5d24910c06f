"""The layers of docs/architecture.md hold: no upward import (the import-linter contract in
``.importlinter``, indirect chains and function-local imports included), no import cycle
between modules, and none between the top-level packages (``novaq``'s subpackages counted
apart: its command line sits at the top, its settings and exceptions at the bottom)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("novaq", "tasks", "workflows", "scheduler", "compute", "virt", "models")


def package_of(module: str) -> str:
    """The node a module counts for: its top-level package, or ``novaq.<sub>``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "novaq" and len(parts) > 1 else parts[0]


def package_edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    edges = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = package_of(module), package_of(imported)
            if a != b:
                edges.add((a, b))
    return edges


def cycle(edges: Iterable[tuple[str, str]]) -> list[str]:
    """One import cycle among the packages (``[a, b, ..., a]``), or [] when there is none."""
    order: TopologicalSorter[str] = TopologicalSorter()
    for importer, imported in edges:
        order.add(importer, imported)
    try:
        order.prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return []


def test_the_cycle_finder_finds_a_cycle_through_three_packages() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}
    assert set(cycle(edges)) == {"a", "b", "c"}
    assert cycle({("a", "b"), ("b", "c"), ("a", "c")}) == []


def test_no_import_cycle_between_top_level_packages() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    edges = package_edges(graph)
    assert ("tasks", "compute") in edges  # the graph is the real one
    assert cycle(edges) == []


def test_no_import_cycle_between_modules() -> None:
    """Not even inside a package: a registry imports its members, never the other way."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    edges = {
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
    }
    assert ("scheduler.filters", "scheduler.filters.ram_filter") in edges
    assert cycle(edges) == []


def test_layers_import_downward_only() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / ".importlinter")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout
