"""Single-use variables written in place: `x = self.embed(t)` / `return x.cumsum(1)` -> `return self.embed(t).cumsum(1)`.

A deletion-only reducer keeps every assignment whose value a kept line reads,
one line each. Here a variable assigned once with one plain name target and
read once, in the same scope, has its value written where it is read and the
assignment goes. The written-in value takes the place (line, column) of the
read, so the line that reads it keeps its own identity for the pairing: a
break on that line is still the same break, and a value whose evaluation
moved past something that matters shows as a refused candidate. Pure
functions over trees; the explorer asks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Any

from casekit.reduce.passes.base import Search, copy_tree

Copy = Callable[[Any], Any]
SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)
NESTED = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of one scope, not those of the functions, classes and comprehensions inside it."""
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, NESTED):
            pending.extend(ast.iter_child_nodes(node))


def _names_anywhere(scope: ast.AST) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Name):
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                counts[name] = counts.get(name, 0) + 2  # never a candidate
    return counts


def single_use(tree: ast.Module) -> list[tuple[int, int]]:
    """The (line, column) of every assignment `name = value` whose name appears exactly twice in its
    scope and everything nested in it: this store, and one read after it in the same scope."""
    found = []
    for scope in ast.walk(tree):
        if not isinstance(scope, SCOPES):
            continue
        counts = _names_anywhere(scope)
        own = list(_own_nodes(scope))
        reads = {n.id: n for n in own if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for node in own:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            name = node.targets[0].id
            read = reads.get(name)
            if (
                counts.get(name) != 2
                or read is None
                or (read.lineno, read.col_offset) <= (node.lineno, node.col_offset)
            ):
                continue
            found.append((node.lineno, node.col_offset))
    return found


def _moved_to(value: ast.expr, place: ast.expr) -> ast.expr:
    """The value placed on the reading line; a node with no place (pysource-minimize's stand-in `0`) keeps
    none, so the stand-ins step and the checklist still see it for what it is."""
    for node in ast.walk(value):
        if isinstance(node, ast.expr) and hasattr(node, "lineno"):
            node.lineno, node.col_offset = place.lineno, place.col_offset
            node.end_lineno, node.end_col_offset = place.end_lineno, place.end_col_offset
    return value


class _Replace(ast.NodeTransformer):
    def __init__(self, name: str, value: ast.expr) -> None:
        self.name, self.value, self.done = name, value, False

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.name and isinstance(node.ctx, ast.Load) and not self.done:
            self.done = True
            return _moved_to(self.value, node)
        return node


def written_in(tree: ast.Module, place: tuple[int, int], copy: Copy) -> ast.Module | None:
    """A copy of `tree` with the assignment at `place` gone and its value written where it is read."""
    new = copy(tree)
    for scope in ast.walk(new):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(scope, field, None)
            if not isinstance(statements, list):
                continue
            for index, statement in enumerate(statements):
                if isinstance(statement, ast.Assign) and (statement.lineno, statement.col_offset) == place:
                    target = statement.targets[0]
                    assert isinstance(target, ast.Name)
                    owner = next(s for s in ast.walk(new) if isinstance(s, SCOPES) and statement in list(_own_nodes(s)))
                    replace = _Replace(target.id, statement.value)
                    del statements[index]
                    if not statements and not isinstance(scope, ast.Module):
                        statements.append(ast.Pass(lineno=statement.lineno, col_offset=statement.col_offset))
                    replace.visit(owner)
                    return new if replace.done else None
    return None


def inline_variables(tree: ast.Module, ask: Callable[[ast.Module], bool], copy: Copy) -> ast.Module:
    """Write in every single-use variable the oracle allows, one at a time (the last ones first)."""
    tried: set[tuple[int, int]] = set()
    while True:
        places = [p for p in single_use(tree) if p not in tried]
        if not places:
            return tree
        place = max(places)
        tried.add(place)
        candidate = written_in(tree, place, copy)
        if candidate is not None and ask(candidate):
            tree = candidate


def run(search: Search) -> None:
    for name in search.facts.order:
        tree = search.trees.get(name)
        if tree is not None:
            inline_variables(tree, lambda candidate: search.ask({name: candidate}), copy_tree)  # noqa: B023 - used at once
