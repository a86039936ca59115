"""Parsing Python source on the host: the one way casekit calls `ast.parse`.

Replay classifies its targets' results in threads, and CPython before 3.11.8 and 3.12.1 keeps
the AST builder's recursion depth in shared state: two threads parsing at once can fail with
"SystemError: AST constructor recursion depth mismatch" (CPython gh-106905). One lock makes the
parses take turns; they take milliseconds.
"""

from __future__ import annotations

import ast
import threading
from functools import lru_cache

_PARSE_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time; SyntaxError (and ValueError for NUL bytes) as ast.parse raises them."""
    with _PARSE_LOCK:
        return ast.parse(source, filename)


def _statement(line: str) -> ast.Module | None:
    """One source line as a statement: a compound statement's header gets a body to parse."""
    text = line.strip()
    for candidate in (text, f"{text} pass", f"{text}\n    pass"):
        try:
            with _PARSE_LOCK:
                return ast.parse(candidate)
        except (SyntaxError, ValueError):
            continue
    return None


@lru_cache(maxsize=4096)
def defined_names(line: str) -> frozenset[str]:
    """Names one source line binds (`p = x.data_ptr()`, `for n in sizes:`, `with f() as y:`)."""
    tree = _statement(line)
    if tree is None:
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


@lru_cache(maxsize=4096)
def used_names(line: str) -> frozenset[str]:
    """Names one source line reads (`if (p % 16) == 0:` reads p)."""
    tree = _statement(line)
    if tree is None:
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def first_statement_lines(source: str) -> set[int]:
    """The line of each function's first statement (after its docstring): a break there compiles no graph."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            body = node.body
            docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            if docstring and len(body) > 1:
                body = body[1:]
            lines.add(body[0].lineno)
    return lines


def statement_lines(source: str) -> list[int]:
    """The line every statement starts on, sorted (a compound statement's header counts as one)."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return []
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.stmt)})


@lru_cache(maxsize=4096)
def normalized_statement(line: str) -> str:
    """One source line in a canonical form: spacing, quotes, redundant parentheses and a trailing comment do
    not count (`ast.unparse`); a line that is not a whole statement (`self.weight = Parameter(`) keeps its text
    with spacing collapsed."""
    text = " ".join(line.split())
    tree = _statement(text)
    if tree is None or not tree.body:
        return text
    unparsed = ast.unparse(tree.body[0])
    return unparsed.removesuffix(":\n    pass").removesuffix(": pass")
