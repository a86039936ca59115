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
from collections.abc import Iterator
from dataclasses import dataclass

LineMap = tuple[int, ...]  # index i: the canonical original line of rendered line i + 1 (0: none)


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            yield node


def _span(node: ast.stmt) -> tuple[int, int]:
    """First and last line of a statement, decorators included (a frame may name a decorator's line)."""
    start = node.lineno
    for decorator in getattr(node, "decorator_list", ()):
        start = min(start, getattr(decorator, "lineno", start))
    return start, getattr(node, "end_lineno", None) or node.lineno


def _own_expressions(node: ast.stmt) -> Iterator[ast.AST]:
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
            start, end = _span(node)
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
        """Lines that hold code: what "lines before -> after" counts (no blank line, no comment)."""
        return count_code_lines(self.text)


def count_code_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


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


def render(tree: ast.Module, index: OriginalIndex) -> Rendered:
    """`tree` (nodes carrying the original's line numbers) as source, each rendered line mapped.

    The rendered text is parsed again; both trees have one shape, so walking them side by side pairs
    each rendered statement with the node it came from. A rendered statement maps to the most
    specific original statement among its own node and its expressions: a statement the reducer
    made up (an `x.item()` left alone where `y = x.item()` stood) has no line of its own, its
    expression does."""
    for node in ast.walk(tree):
        if getattr(node, "type_comment", None) is not None:
            setattr(node, "type_comment", None)  # noqa: B010 - the library turns `x: int = 1` into `x = 1  # type: ` on the way
    text = ast.unparse(tree)
    again = ast.parse(text)
    placed: list[tuple[int, int, int]] = []  # (rendered start, rendered end, canonical original line)
    for rendered, original in zip(ast.walk(again), ast.walk(tree), strict=False):
        if type(rendered) is not type(original):
            raise RenderError(f"{type(rendered).__name__} rendered where {type(original).__name__} was")
        if not isinstance(rendered, ast.stmt):
            continue
        assert isinstance(original, ast.stmt)
        lines = [getattr(original, "lineno", 0)] + [
            getattr(expression, "lineno", 0) for expression in _own_expressions(original)
        ]
        known = [(index.specificity(line), index.canonical(line)) for line in lines if line]
        best = min(((size, line) for size, line in known if line is not None), default=None)
        start, end = _span(rendered)
        placed.append((start, end, best[1] if best else 0))
    size = len(text.splitlines())
    mapped = [0] * size
    narrowest = [1 << 30] * size
    for start, end, canonical in placed:
        for line in range(start, min(end, size) + 1):
            if end - start <= narrowest[line - 1]:
                mapped[line - 1], narrowest[line - 1] = canonical, end - start
    return Rendered(text + "\n", tuple(mapped))
