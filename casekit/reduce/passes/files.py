"""Whole included files out: once what imported a file has shrunk, it may not be needed."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from casekit.reduce.passes.base import Search


def run(search: Search) -> None:
    """Each included file out, one at a time (the oracle tells whether anything still needed it)."""
    for name in search.facts.removable:
        if search.trees.get(name) is not None:
            search.ask({name: None})


def unimported(search: Search) -> None:
    """One candidate without every included file no import statement left could name: cheap enough for the
    tidy stage, where a reduction cut short by its time leaves an emptied `config.py` behind."""
    unnamed = {name: None for name in search.facts.removable if not _named_by_an_import(search.trees, name)}
    if any(search.trees.get(name) is not None for name in unnamed):
        search.ask(unnamed)


def _named_by_an_import(trees: Mapping[str, ast.Module | None], name: str) -> bool:
    """Whether an import in another file may load the file `name` (`speech/config.py`): a module path or an
    imported name with its stem (`config`, or `speech` for `speech/__init__.py`). Loose on purpose: a false
    "named" only keeps a file the oracle-judged steps before may still remove."""
    parts = name.removesuffix(".py").split("/")
    stem = parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]
    for other, tree in trees.items():
        if other == name or tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                paths = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                paths = [node.module or "", *(alias.name for alias in node.names)]
            else:
                continue
            if any(stem in path.split(".") for path in paths):
                return True
            if isinstance(node, ast.ImportFrom) and node.module is None:
                return True  # `from . import x`: relative to a folder this check does not place
    return False
