"""Loops run once: layers cut to one, steps to one, batches to one.

A model applies its blocks in a loop, a script steps through its data in one: a break the first
iteration shows is the same break, and every candidate after this one runs a fraction of the work
(Dynamo compiles each layer's frames again, since each layer is another module). A `for` loop
becomes its target bound to the first item, then its body (`block = next(iter(self.blocks))`, the
idiom a maintainer writes in a repro); all loops at once first, then each on its own. A loop whose
body leaves or restarts it (`break`, `continue`) or that has an `else` is left to the later passes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from casekit.reduce.passes.base import Search, copy_tree

LOOPS = (ast.For, ast.While, ast.AsyncFor)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _leaves_itself(loop: ast.For) -> bool:
    pending: list[ast.AST] = list(loop.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Break | ast.Continue):
            return True
        if not isinstance(node, LOOPS + SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _loops(tree: ast.Module) -> Iterator[tuple[list[ast.stmt], int]]:
    """(the body holding it, its index) for every `for` loop that can run once, outer ones first."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop(0)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for index, statement in enumerate(body):
                if isinstance(statement, ast.For) and not statement.orelse and not _leaves_itself(statement):
                    yield body, index
                if isinstance(statement, ast.stmt):
                    pending.append(statement)
        pending.extend(getattr(node, "handlers", None) or ())


def run_once(loop: ast.For) -> list[ast.stmt]:
    inner = ast.Call(func=ast.Name(id="iter", ctx=ast.Load()), args=[loop.iter], keywords=[])
    first = ast.Call(func=ast.Name(id="next", ctx=ast.Load()), args=[inner], keywords=[])
    bind = ast.Assign(targets=[loop.target], value=first)
    for node in (bind, first, first.func, inner, inner.func):  # on the loop's own (first) line
        ast.copy_location(node, loop)
        node.end_lineno = loop.lineno
    return [bind, *loop.body]


def _place(loop: ast.stmt) -> tuple[int, int]:
    return (loop.lineno, loop.col_offset)


def once(tree: ast.Module, places: set[tuple[int, int]] | None) -> ast.Module | None:
    """A copy of `tree` with the loops at `places` (None: all) run once; None when none is there."""
    new = copy_tree(tree)
    found = [(body, index) for body, index in _loops(new) if places is None or _place(body[index]) in places]
    for body, index in reversed(found):  # inner loops first: an outer loop's body is copied whole
        loop = body[index]
        assert isinstance(loop, ast.For)
        body[index : index + 1] = run_once(loop)
    return new if found else None


def run(search: Search) -> None:
    for name in search.facts.order:
        tree = search.trees.get(name)
        if tree is None:
            continue
        places = [_place(body[index]) for body, index in _loops(tree)]
        candidate = once(tree, None)
        if candidate is None or search.ask({name: candidate}) or len(places) == 1:
            continue
        for place in places:  # each on its own, from the best so far
            tree = search.trees[name]
            candidate = once(tree, {place}) if tree is not None else None
            if candidate is not None:
                search.ask({name: candidate})
