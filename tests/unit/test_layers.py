"""The layers of docs/architecture.md hold: no upward import (the import-linter contract in
``.importlinter``, indirect chains and function-local imports included) and no import
cycle between the top-level packages (``novaq``'s subpackages counted apart: its command
line sits at the top, its settings and exceptions at the bottom)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
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


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one package (Tarjan)."""
    adjacent: dict[str, list[str]] = {}
    for a, b in edges:
        adjacent.setdefault(a, []).append(b)
        adjacent.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in adjacent[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(adjacent):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_three_packages() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({("a", "b"), ("b", "c")}) == []


def test_no_import_cycle_between_top_level_packages() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    edges = package_edges(graph)
    assert ("tasks", "compute") in edges  # the graph is the real one
    assert cycles(edges) == []


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
