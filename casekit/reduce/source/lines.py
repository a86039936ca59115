"""Where a candidate's lines come from: every line of a reduced file, as a statement of the original.

A reducer deletes and rewrites statements, so a break the original showed at
`model.py:149` shows at `model.py:12` in a candidate. The pairing compares
places by file and line, so both sides are first put in one frame of
reference: the *canonical line* of a line is the first line of the innermost
original statement that holds it. The original's lines map through its own
tree; a candidate's through its tree, whose nodes are the original's nodes
(pysource-minimize works on deep copies that keep their `lineno`), re-parsed
from the rendered text so each rendered line is found in it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from casekit.reduce.source.comments import Comments, read_comments

LineMap = tuple[int, ...]  # index i: the canonical original line of rendered line i + 1 (0: none)


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            yield node


def span(node: ast.stmt) -> tuple[int, int]:
    """First and last line of a statement, decorators included (a frame may name a decorator's line)."""
    start = node.lineno
    for decorator in getattr(node, "decorator_list", ()):
        start = min(start, getattr(decorator, "lineno", start))
    return start, getattr(node, "end_lineno", None) or node.lineno


def own_expressions(node: ast.stmt) -> Iterator[ast.AST]:
    """The expressions of a statement that are not inside one of its nested statements."""
    pending: list[ast.AST] = [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
    while pending:
        child = pending.pop()
        yield child
        pending.extend(c for c in ast.iter_child_nodes(child) if not isinstance(c, ast.stmt))


class OriginalIndex:
    """One original file: the innermost statement of each line, and its text."""

    def __init__(self, text: str, tree: ast.Module | None = None) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.tree = tree if tree is not None else ast.parse(text)
        self._canonical: dict[int, tuple[int, int]] = {}  # line -> (canonical line, span size)
        for node in _statements(self.tree):
            start, end = span(node)
            size = end - start
            for line in range(start, end + 1):
                known = self._canonical.get(line)
                if known is None or size <= known[1]:
                    self._canonical[line] = (node.lineno, size)

    def canonical(self, line: int) -> int | None:
        """The first line of the innermost statement holding `line` (None: no statement holds it)."""
        found = self._canonical.get(line)
        return found[0] if found else None

    def specificity(self, line: int) -> int:
        """How many lines the innermost statement at `line` spans (smaller: more specific)."""
        found = self._canonical.get(line)
        return found[1] if found else 1 << 30

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def code_lines(self) -> int:
        """Lines that hold code: what "lines before -> after" counts (no blank line, comment or docstring)."""
        return count_code_lines(self.text)

    @functools.cached_property
    def comments(self) -> Comments:
        return read_comments(self.text, self.tree, self.canonical)


def count_code_lines(text: str) -> int:
    """Lines holding code: not blank, not a comment, not a docstring (documentation, as comments are)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    documentation: set[int] = set()
    for node in ast.walk(tree) if tree is not None else ():
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                documentation.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in documentation
    )


def identity_map(index: OriginalIndex) -> LineMap:
    """The original file's own map: each line to its canonical line."""
    return tuple(index.canonical(line) or 0 for line in range(1, len(index.lines) + 1))


@dataclass(frozen=True)
class Rendered:
    """A candidate file as text, with where each of its lines comes from."""

    text: str
    lines: LineMap


class RenderError(ValueError):
    """A tree whose rendering does not parse back to the same shape (it cannot be placed)."""


@dataclass(frozen=True)
class Placed:
    """A rendered statement: its lines in the text, its canonical original line, its node."""

    start: int
    end: int
    canonical: int  # 0: none
    node: ast.stmt  # the candidate's node (its notes, its kind)
    header_end: int  # a compound statement's last header line; a simple one's last line
