"""The finished text of a reduced file: the original's comments on the statements kept, then formatted.

The comments come from the original's own source (`comments.py`, read with tokenize): a block above a
kept statement goes above it again, at its indentation; a comment at the end of a kept statement's line
goes at the end of its (last header) line. A note a tidy step left on a node (`NOTE`: why the compile
call says `backend="eager"`) is written the same way. Each original statement's comments are written
once, by the first rendered statement placed on it. Then `format.py` formats the whole file.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from casekit.reduce.source.format import formatted
from casekit.reduce.source.lines import OriginalIndex, Placed

NOTE = "casekit_note"  # an attribute a tidy step sets on a node: a comment for its line


def _notes(statement: ast.stmt) -> list[str]:
    found = []
    pending: list[ast.AST] = [statement]
    while pending:
        node = pending.pop()
        note = getattr(node, NOTE, None)
        if isinstance(note, str) and note not in found:
            found.append(note)
        pending.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.stmt))
    return found


def finished_text(text: str, placed: Sequence[Placed], index: OriginalIndex) -> str:
    """`text` (ast.unparse's, placed statement by statement) with the comments written back, formatted."""
    lines = text.splitlines()
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    written: set[int] = set()
    comments = index.comments
    for statement in placed:
        trailing = list(_notes(statement.node))
        if statement.canonical and statement.canonical not in written:
            written.add(statement.canonical)
            block = comments.above.get(statement.canonical, ())
            if block:
                indent = lines[statement.start - 1][
                    : len(lines[statement.start - 1]) - len(lines[statement.start - 1].lstrip())
                ]
                before.setdefault(statement.start, []).extend(indent + comment for comment in block)
            trailing = [*comments.trailing.get(statement.canonical, ()), *trailing]
        if trailing:
            after.setdefault(statement.header_end, []).extend(c if c.startswith("#") else f"# {c}" for c in trailing)
    out: list[str] = []
    for number, line in enumerate(lines, 1):
        out.extend(before.get(number, ()))
        out.append(line + ("  " + "  ".join(after[number]) if number in after else ""))
    commented = "\n".join(out) + "\n"
    return formatted(commented) or commented
