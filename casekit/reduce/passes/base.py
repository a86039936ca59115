"""What every pass sees: the best files so far as trees, what the original's run told, and one question.

A pass is one function `run(search)`: it builds candidates from `search.trees` and asks about each
with `search.ask(trees)`, one at a time, deciding what to try next from the answer (a kept candidate
becomes `search.trees` at once). Asking one at a time is what lets the explorer speculate: `--jobs`
copies of the search each assume "not kept" for the question before, so a pass never batches.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, Protocol

from casekit.reduce.facts import Facts

Trees = dict[str, ast.Module | None]  # file -> its tree (None: an included file left out)


class Skipped(BaseException):
    """The reducer's time for reducing is up: the step asking stops, and only the finishing steps run.
    A BaseException, so that no pass (nor pysource-minimize) takes it for a failed candidate."""


class Search(Protocol):
    """The search a pass runs in (the explorer's, or a test's in-process one)."""

    facts: Facts
    trees: Trees  # the best so far: every kept candidate replaces it

    def ask(self, trees: Mapping[str, ast.Module | None]) -> bool:
        """Is the candidate made of `trees` (files not named: as they are) kept by the oracle? (Skipped:
        the time for reducing is up.)"""
        ...

    def say(self, phase: str) -> None:
        """Tell the reducer what is being tried now (its progress line)."""
        ...

    def finishing(self, on: bool) -> None:
        """Render the next candidates as the result is written: the original's comments, formatted."""
        ...


def copy_tree(value: Any) -> Any:
    """A deep copy of an AST (fields, line numbers and pysource-minimize's node indexes), twice as fast
    as `copy.deepcopy`: every candidate a pass builds starts as a copy of the best trees."""
    if isinstance(value, ast.AST):
        new = value.__class__.__new__(value.__class__)
        fields = new.__dict__
        for key, item in value.__dict__.items():
            fields[key] = copy_tree(item) if isinstance(item, ast.AST | list) else item
        return new
    if isinstance(value, list):
        return [copy_tree(item) if isinstance(item, ast.AST | list) else item for item in value]
    return value


def place_made_up_passes(tree: ast.Module) -> None:
    """A `pass` a pass made up (for a body it emptied) takes its parent's place in the original's lines."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Pass) and not hasattr(node, "lineno"):
            node.lineno = node.end_lineno = 0
            node.col_offset = node.end_col_offset = 0
