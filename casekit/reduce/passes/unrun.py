"""The first, largest cut: every statement the original never ran, in one candidate.

The original's eager run records the lines it ran in the user's files (the
probe's line trace). A function whose body never ran was never called; a branch
that never ran was never taken; a statement that never ran did nothing. One
candidate without all of them is judged by the oracle like any other: when it
keeps the break, the library starts from it and saves the hundreds of
one-statement candidates it would take to find the same cut. When it does not
(a function referenced but never called, code the compiled run alone takes),
nothing is lost but one run.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping

from casekit.reduce.passes.base import Search, place_made_up_passes

BODIES = ("body", "orelse", "finalbody")


def _header(statement: ast.stmt) -> range:
    """The lines of a statement that run when it starts: a compound one's header, a simple one's span."""
    start = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])
    body = getattr(statement, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return range(start, max(start, body[0].lineno - 1) + 1)
    return range(start, (statement.end_lineno or statement.lineno) + 1)


def _ran(statement: ast.stmt, lines: set[int]) -> bool:
    return any(line in lines for line in _header(statement))


def _any_ran(body: list[ast.stmt], lines: set[int]) -> bool:
    return any(_ran(s, lines) or _any_ran(getattr(s, "body", []) or [], lines) for s in body)


def _prune(body: list[ast.stmt], lines: set[int]) -> list[ast.stmt]:
    kept: list[ast.stmt] = []
    for statement in body:
        if not _ran(statement, lines):
            continue
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            if not _any_ran(statement.body, lines):
                continue  # defined, never called
        if isinstance(statement, ast.Match):
            kept.append(statement)  # cases are patterns, not statements: left to the library
            continue
        for name in BODIES:
            inner = getattr(statement, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                pruned = _prune(inner, lines)
                setattr(statement, name, pruned or ([ast.Pass()] if name == "body" else []))
        if isinstance(statement, ast.Try | ast.TryStar):
            for handler in statement.handlers:
                handler.body = _prune(handler.body, lines) or [ast.Pass()]
        kept.append(statement)
    return kept


def without_unrun(
    trees: Mapping[str, ast.Module | None], ran: Mapping[str, set[int]], script: str
) -> dict[str, ast.Module | None]:
    """A copy of the trees without the statements the original never ran; an included file it never
    ran (never imported) is left out."""
    out: dict[str, ast.Module | None] = {}
    for name, tree in trees.items():
        if tree is None or name not in ran:
            out[name] = None if tree is not None and name != script else tree
            continue
        pruned = copy.deepcopy(tree)
        pruned.body = _prune(pruned.body, ran[name]) or [ast.Pass()]
        place_made_up_passes(pruned)
        out[name] = pruned
    return out


def run(search: Search) -> None:
    """One candidate without every statement the original never ran."""
    facts = search.facts
    if facts.ran:
        search.ask(without_unrun(search.trees, {n: set(lines) for n, lines in facts.ran.items()}, facts.script))
