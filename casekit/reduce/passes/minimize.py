"""pysource-minimize's fine steps (expressions, arguments, bodies, the rest), over each file in turn.

The library decides its next tree from the answer about the last one. Two of its seams are private,
so the dependency is pinned to one release (pyproject.toml) and `use_fast_copy` checks the seam it
replaces before replacing it: the library deep-copies the whole tree for every try, and a copy that
knows ASTs is twice as fast as `copy.deepcopy`.
"""

from __future__ import annotations

import ast
import copy
import warnings
from typing import Any

from casekit.errors import CasekitError
from casekit.reduce.passes.base import Search, copy_tree


def skeleton(tree: ast.AST) -> tuple[Any, ...]:
    """The tree's shape without constant values and variable names (two trees that differ only there match)."""
    out: list[Any] = []
    for node in ast.walk(tree):
        out.append(type(node).__name__)
        for name, value in ast.iter_fields(node):
            if isinstance(node, ast.Constant) and name == "value" or isinstance(node, ast.Name) and name == "id":
                continue
            if isinstance(value, list):
                out.append(len(value))
            elif value is None or isinstance(value, str | int | float | bytes):
                out.append(value)
    return tuple(out)


class _FastCopy:
    """Stands in for the `copy` module inside pysource-minimize's base (its only use: deepcopy of trees)."""

    deepcopy = staticmethod(copy_tree)


def use_fast_copy() -> None:
    """Give the library the fast copy; CasekitError if its private seam is not the one this was written for."""
    from pysource_minimize import _minimize_base

    seam = getattr(_minimize_base, "copy", None)
    if seam is not copy and seam is not _FastCopy:
        raise CasekitError(f"pysource-minimize {_version()}: its private copy seam moved (casekit pins 0.11.0)")
    _minimize_base.copy = _FastCopy  # type: ignore[assignment]


def _version() -> str:
    import pysource_minimize

    return str(getattr(pysource_minimize, "version", "?"))


def run(search: Search) -> None:
    """One round of the library over every file (the pipeline repeats it while it changes something)."""
    from pysource_minimize import CouldNotMinimize, StopMinimization
    from pysource_minimize._minimize import minimize_ast

    shapes: dict[str, tuple[Any, ...]] = {}

    def checker(name: str):  # type: ignore[no-untyped-def]
        def check(candidate: ast.Module) -> bool:
            # the library also tries renames and new constants: the inputs are shrunk apart, with their own
            # rules, and a rename would hide the user's names, so a tree of the same shape is "no change"
            current = search.trees.get(name)
            shape = skeleton(candidate)
            if shape == shapes[name]:
                return current is not None and ast.dump(candidate) == ast.dump(current)
            kept = search.ask({name: candidate})
            if kept:
                shapes[name] = shape
            return kept

        return check

    for name in search.facts.order:
        tree = search.trees.get(name)
        if tree is None:
            continue
        shapes[name] = skeleton(tree)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                minimize_ast(tree, checker(name), retries=0)
        except (CouldNotMinimize, StopMinimization):
            continue
