"""No import cycles in casekit, read from the source (ast), so nothing that runs late can hide one.

Every import counts: at the top of a module, inside a function (a "late" import is a
cycle all the same), under TYPE_CHECKING. `from casekit.pkg import sub` imports the
package `casekit.pkg` as well as `casekit.pkg.sub`, so a package's __init__ that
imports a child which imports the package back is a cycle too. import-linter's
contracts in pyproject.toml (`make lint`) check the layers; this checks the circles
between any two modules, and can show it fails on a planted one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules_of(root: Path, package: str = "casekit") -> dict[str, Path]:
    """Dotted module name -> file, for every module and package under `root/package`."""
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path) -> Iterator[str]:
    """Every name an import statement anywhere in the file makes Python import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path, package: str = "casekit") -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (names that are not modules map to their module)."""
    modules = modules_of(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported_names(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    return "; ".join(f"{a} -> {b}" for a in component for b in sorted(graph[a] & members))


def test_casekit_has_no_import_cycles() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 50 and "casekit.bisect.plan" in graph["casekit.cli.bisect"]
    assert [describe(graph, component) for component in cycles(graph)] == []


def test_the_check_finds_cycles_through_late_imports_and_package_inits(tmp_path: Path) -> None:
    package = tmp_path / "casekit"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from casekit.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import a  # late, still a cycle\n")
    (package / "sub" / "__init__.py").write_text("from casekit.sub.child import x\n")
    (package / "sub" / "child.py").write_text("from casekit.sub import other\n")
    (package / "sub" / "other.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import casekit.c\n"
    )
    (package / "c.py").write_text("import casekit.sub.other\n")
    graph = import_graph(tmp_path)
    assert cycles(graph) == [
        ["casekit.a", "casekit.b"],
        ["casekit.c", "casekit.sub.other"],
        ["casekit.sub", "casekit.sub.child"],
    ]
    assert describe(graph, ["casekit.a", "casekit.b"]) == "casekit.a -> casekit.b; casekit.b -> casekit.a"
