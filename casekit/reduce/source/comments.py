"""The original's comments, read with `tokenize`, keyed by the statement they belong to.

`ast` keeps no comment, so a reduced file rendered from trees has none. Here each comment of an
original file is tied to a statement (its canonical line, `lines.py`): a comment at the end of a line
belongs to the innermost statement holding that line; a block of comment lines belongs to the
statement that starts right below it. The finished rendering (`finish.py`) writes back the
comments of the statements a candidate kept.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Comments:
    """One file's comments: above each statement (the lines of the block) and at its end."""

    above: dict[int, tuple[str, ...]] = field(default_factory=dict)
    trailing: dict[int, tuple[str, ...]] = field(default_factory=dict)


def read_comments(text: str, tree: ast.Module, canonical: Callable[[int], int | None]) -> Comments:
    """The comments of `text`, tied to canonical lines (a shebang and an encoding line are not comments
    a repro needs)."""
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            starts.setdefault(first, node.lineno)
    lines = text.splitlines()
    above: dict[int, list[str]] = {}
    trailing: dict[int, list[str]] = {}
    block: list[str] = []
    block_end = 0
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return Comments()
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        line, column = token.start
        if line <= 2 and (token.string.startswith("#!") or "coding" in token.string):
            continue
        if lines[line - 1][:column].strip():  # code before it on its line: a trailing comment
            where = canonical(line)
            if where is not None:
                trailing.setdefault(where, []).append(token.string)
            continue
        if block and line != block_end + 1:
            block = []
        block.append(token.string)
        block_end = line
        following = starts.get(line + 1)
        if following is not None:
            above.setdefault(following, []).extend(block)
            block = []
    return Comments({k: tuple(v) for k, v in above.items()}, {k: tuple(v) for k, v in trailing.items()})
