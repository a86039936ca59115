"""Parsing Python source on the host: the one way casekit calls `ast.parse`.

Replay classifies its targets' results in threads, and CPython before 3.11.8 and 3.12.1 keeps
the AST builder's recursion depth in shared state: two threads parsing at once can fail with
"SystemError: AST constructor recursion depth mismatch" (CPython gh-106905). One lock makes the
parses take turns; they take milliseconds.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time; SyntaxError (and ValueError for NUL bytes) as ast.parse raises them."""
    with _PARSE_LOCK:
        return ast.parse(source, filename)
