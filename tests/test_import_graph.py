"""No import circles in ``wan_core`` and ``nodes`` (issue 42): every import counts, also one inside a function
(it still ties the two modules together), except those under ``if TYPE_CHECKING:`` (never run)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wan_core", "nodes")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``PACKAGES`` under ``root`` (packages by their name)."""
    files = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def _under_type_checking(parents: list[ast.AST]) -> bool:
    return any(isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in parents)


def _named(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules an import statement names: ``from .x import y`` names ``pkg.x.y`` when that is a module."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``PACKAGES`` it imports (a name inside a module counts as that module)."""
    files = module_files(root)
    known = set(files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        todo: list[tuple[ast.AST, list[ast.AST]]] = [(ast.parse(path.read_text(encoding="utf-8")), [])]
        while todo:
            node, parents = todo.pop()
            todo.extend((child, [*parents, node]) for child in ast.iter_child_nodes(node))
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or _under_type_checking(parents):
                continue
            for target in _named(node, module, path.name == "__init__.py", known):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, targets = work[-1]
            w = next(targets, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_function_level_imports_and_skips_type_checking(tmp_path):
    pkg = tmp_path / "nodes"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import x\n"
                              "from .a import f\n")
    (pkg / "c.py").write_text("from nodes import b\n")
    graph = import_graph(tmp_path)
    assert graph["nodes.a"] == {"nodes.b"} and graph["nodes.b"] == {"nodes.a"} and graph["nodes.c"] == {"nodes.b"}
    assert cycles(graph) == [["nodes.a", "nodes.b"]]


def test_no_import_cycles():
    found = cycles(import_graph(ROOT))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
