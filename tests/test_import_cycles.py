"""No import circle under training/: read from the source, every import statement counts,
including those inside functions (a deferred import hides a circle, it does not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    """``training/recipes/gather.py`` -> ``training.recipes.gather`` (a package: its folder)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports anywhere in its body; ``from P import M``
    imports the module P.M when there is one, else P."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= (submodules & known) or {node.module}
    return found & known


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` (under the repository) -> the package's modules it imports."""
    files = {module_name(p, REPO): p for p in (REPO / package).rglob("*.py")}
    known = set(files)
    return {name: imports_of(p.read_text(), known) - {name} for name, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as its modules in order (first repeated last), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done:
            return None
        for target in sorted(graph[name]):
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return None


def test_training_has_no_import_circle() -> None:
    graph = import_graph("training")
    assert "training.recipes.publish_model" in graph and len(graph) > 20
    assert find_cycle(graph) is None


def test_a_circle_through_a_deferred_import_is_found() -> None:
    first = "from training.recipes import second\n"
    second = "def late():\n    from training.recipes.first import x\n"
    known = {"training.recipes", "training.recipes.first", "training.recipes.second"}
    graph = {
        "training.recipes": set(),
        "training.recipes.first": imports_of(first, known),
        "training.recipes.second": imports_of(second, known),
    }
    assert graph["training.recipes.first"] == {"training.recipes.second"}
    assert find_cycle(graph) == [
        "training.recipes.first",
        "training.recipes.second",
        "training.recipes.first",
    ]
