"""Configuration values written in place: `config.dim` -> `32`, so the config class can go.

Model code reads its sizes from a config object (a dataclass or a class of
constants), and a reducer that only deletes code must keep that class and
every field a kept line reads. Here each attribute that a module-level class
assigns a literal (`dim: int = 32`, `eps = 1e-5`, `act = "gelu"`) is
written in place of the reads `<anything>.dim` in every reduced file (a call
`x.dim()` is left alone): a candidate for the reducer's oracle like any
other, so an instance that overrides the value (`Config(dim=64)`) or a
tensor's own `.dim` shows as a refused candidate, never as a wrong result.
Pure functions over trees; the explorer asks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from casekit.reduce.passes.base import Search, copy_tree

Trees = dict[str, ast.Module | None]
Copy = Callable[[Any], Any]


def _literal(node: ast.expr | None) -> ast.expr | None:
    """The literal a field's value is: a constant, a signed number, a list or tuple of literals, or the
    literal a dataclass `field(default=...)` / `field(default_factory=lambda: ...)` gives each instance."""
    if isinstance(node, ast.Constant) and not isinstance(node.value, bytes):
        return node
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
    ):
        return node
    if isinstance(node, ast.List | ast.Tuple) and all(_literal(item) is not None for item in node.elts):
        return node
    if isinstance(node, ast.Call) and _names_field(node.func) and not node.args:
        for keyword in node.keywords:
            if keyword.arg == "default":
                return _literal(keyword.value)
            factory = keyword.value
            if keyword.arg == "default_factory" and isinstance(factory, ast.Lambda) and not _takes(factory):
                return _literal(factory.body)
    return None


def _names_field(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "field") or (
        isinstance(func, ast.Attribute) and func.attr == "field"
    )


def _takes(function: ast.Lambda) -> bool:
    arguments = function.args
    return bool(arguments.posonlyargs or arguments.args or arguments.kwonlyargs or arguments.vararg or arguments.kwarg)


def class_literals(trees: Mapping[str, ast.Module | None]) -> dict[str, ast.expr]:
    """Attribute name -> its literal, for every name a module-level class body assigns a literal to, and
    only once in all the files (a name two classes give different values is left out)."""
    found: dict[str, ast.expr] = {}
    clashing: set[str] = set()
    for tree in trees.values():
        for top in tree.body if tree is not None else ():
            if not isinstance(top, ast.ClassDef):
                continue
            for statement in top.body:
                target, value = None, None
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    target, value = statement.target.id, _literal(statement.value)
                elif (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)
                ):
                    target, value = statement.targets[0].id, _literal(statement.value)
                if target is None or value is None:
                    continue
                if target in found and ast.dump(found[target]) != ast.dump(value):
                    clashing.add(target)
                found.setdefault(target, value)
    return {name: value for name, value in found.items() if name not in clashing}


class _Inline(ast.NodeTransformer):
    def __init__(self, values: Mapping[str, ast.expr], copy: Copy) -> None:
        self.values, self.copy = values, copy
        self.changed = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Attribute):  # `x.dim()` is a method call, not the config's field
            func.value = self.visit(func.value)
        else:
            node.func = self.visit(func)
        node.args = [self.visit(a) for a in node.args]
        for keyword in node.keywords:
            keyword.value = self.visit(keyword.value)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        value = self.values.get(node.attr)
        if value is None or not isinstance(node.ctx, ast.Load):
            self.generic_visit(node)
            return node
        self.changed += 1
        return ast.copy_location(self.copy(value), node)


def inlined(trees: Trees, names: Sequence[str], values: Mapping[str, ast.expr], copy: Copy) -> Trees | None:
    """Copies of the trees with the reads of `names` written as their literals (None: no read found)."""
    chosen = {name: values[name] for name in names}
    out: Trees = {}
    changed = 0
    for file, tree in trees.items():
        if tree is None:
            out[file] = None
            continue
        inline = _Inline(chosen, copy)
        out[file] = inline.visit(copy(tree))
        changed += inline.changed
    return out if changed else None


def inline_literals(trees: Trees, ask: Callable[[Trees], bool], copy: Copy) -> Trees:
    """Write in as many config literals as the oracle allows: all at once, else each half on its own."""
    values = class_literals(trees)
    pending = [list(values)]
    while pending:
        names = pending.pop(0)
        candidate = inlined(trees, names, values, copy)
        if candidate is None:
            continue
        if ask(candidate):
            trees = candidate
        elif len(names) > 1:
            half = len(names) // 2
            pending[:0] = [names[:half], names[half:]]
    return trees


def run(search: Search) -> None:
    inline_literals(search.trees, search.ask, copy_tree)
