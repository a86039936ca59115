"""A candidate: every reduced file as a tree (original line numbers kept), its text and its line map."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from casekit.reduce.source.finish import finished_text
from casekit.reduce.source.lines import (
    LineMap,
    OriginalIndex,
    Placed,
    Rendered,
    RenderError,
    count_code_lines,
    own_expressions,
    span,
)


@dataclass
class Candidate:
    """One version of the reduced files; a file mapped to None is left out (an include no longer needed)."""

    files: dict[str, Rendered | None]
    trees: dict[str, ast.Module | None] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        """The content's identity: two candidates with one text are one candidate."""
        digest = hashlib.sha256()
        for name in sorted(self.files):
            rendered = self.files[name]
            digest.update(f"{name}\0{'-' if rendered is None else rendered.text}\0".encode())
        return digest.hexdigest()

    def code_lines(self) -> int:
        return sum(count_code_lines(r.text) for r in self.files.values() if r is not None)

    def lines_of(self, name: str) -> LineMap | None:
        rendered = self.files.get(name)
        return rendered.lines if rendered is not None else None


def render_candidate(
    trees: Mapping[str, ast.Module | None], indexes: Mapping[str, OriginalIndex], finished: bool = False
) -> Candidate:
    """Render every tree (RenderError when one cannot be placed); `finished`: as the result is written."""
    files = {name: (None if tree is None else render(tree, indexes[name], finished)) for name, tree in trees.items()}
    return Candidate(files, dict(trees))


def render(tree: ast.Module, index: OriginalIndex, finished: bool = False) -> Rendered:
    """`tree` (nodes carrying the original's line numbers) as source, each rendered line mapped.

    The rendered text is parsed again; both trees have one shape, so walking them side by side pairs
    each rendered statement with the node it came from. A rendered statement maps to the most
    specific original statement among its own node and its expressions: a statement the reducer
    made up (an `x.item()` left alone where `y = x.item()` stood) has no line of its own, its
    expression does. `finished`: the text as the result is written, with the original's comments of
    the kept statements and formatted (`finish.py`); formatting keeps the tree, so it is placed the same."""
    for node in ast.walk(tree):
        if getattr(node, "type_comment", None) is not None:
            setattr(node, "type_comment", None)  # noqa: B010 - the library turns `x: int = 1` into `x = 1  # type: ` on the way
    text = ast.unparse(tree)
    placed = _placed(text, tree, index)
    if finished:
        text = finished_text(text, placed, index)
        placed = _placed(text, tree, index)
    size = len(text.splitlines())
    mapped = [0] * size
    narrowest = [1 << 30] * size
    for statement in placed:
        start, end, canonical = statement.start, statement.end, statement.canonical
        for line in range(start, min(end, size) + 1):
            if end - start <= narrowest[line - 1]:
                mapped[line - 1], narrowest[line - 1] = canonical, end - start
    return Rendered(text.rstrip("\n") + "\n", tuple(mapped))


def _placed(text: str, tree: ast.Module, index: OriginalIndex) -> list[Placed]:
    again = ast.parse(text)
    placed: list[Placed] = []
    for rendered, original in zip(ast.walk(again), ast.walk(tree), strict=False):
        if type(rendered) is not type(original):
            raise RenderError(f"{type(rendered).__name__} rendered where {type(original).__name__} was")
        if not isinstance(rendered, ast.stmt):
            continue
        assert isinstance(original, ast.stmt)
        lines = [getattr(original, "lineno", 0)] + [
            getattr(expression, "lineno", 0) for expression in own_expressions(original)
        ]
        known = [(index.specificity(line), index.canonical(line)) for line in lines if line]
        best = min(((size, line) for size, line in known if line is not None), default=None)
        start, end = span(rendered)
        body = getattr(rendered, "body", None)
        header_end = body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt) else end
        placed.append(Placed(start, end, best[1] if best else 0, original, max(header_end, rendered.lineno)))
    return placed
