"""Docstrings of the kept definitions back, from the original: the module's, each class's and function's.

A docstring is a statement that does nothing, so the reduction takes it among the first; the
maintainer who reads the result wants to know what each kept piece was for. Each definition the
result kept (the same node, at the same place as in the original) gets its original docstring back,
and the module its own, in one candidate the oracle judges.
"""

from __future__ import annotations

import ast

from casekit.reduce.passes.base import Search, Trees, copy_tree

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _docstring(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    first = body[0] if isinstance(body, list) and body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def with_docstrings(trees: Trees, originals: dict[str, ast.Module]) -> Trees | None:
    """A copy of the trees with the docstrings of the kept definitions back (None: none is missing)."""
    out = dict(trees)
    changed = False
    for file, tree in trees.items():
        original = originals.get(file)
        if tree is None or original is None:
            continue
        documented = {
            (n.lineno, n.col_offset, n.name): doc
            for n in ast.walk(original)
            if isinstance(n, DEFINITIONS) and (doc := _docstring(n)) is not None
        }
        new = copy_tree(tree)
        for node in [new, *(n for n in ast.walk(new) if isinstance(n, DEFINITIONS))]:
            if isinstance(node, ast.Module):
                doc = _docstring(original)
            else:
                doc = documented.get((node.lineno, node.col_offset, node.name))
            if doc is None or _docstring(node) is not None:
                continue
            body = node.body
            if len(body) == 1 and isinstance(body[0], ast.Pass) and not isinstance(node, ast.Module):
                body.clear()  # the docstring is a body of its own
            body.insert(0, copy_tree(doc))
            changed = True
        out[file] = new
    return out if changed else None


def run(search: Search) -> None:
    originals = {name: ast.parse(text) for name, text in search.facts.originals.items()}
    candidate = with_docstrings(search.trees, originals)
    if candidate is not None:
        search.ask(candidate)
