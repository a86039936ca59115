"""What each frame of the break's call path recomputes before it, out in one candidate: `x = x +
self.attn(self.norm(x))` before `self.ffn(x)`, the line that leads to the break.

A model's forward passes one value through layer after layer (a residual block, a norm, a mask
applied in place), and a break in the last of them rarely needs the ones before: the value they
rebind still has its kind and shape without them. In each function on the path, every statement
before the path's line that only rebinds names already bound there (a parameter, an earlier
assignment) goes, at every level of nesting that holds the path's line; what only those
statements read (the attention, its norm, the masks and tables passed for it) is then unread, and
the unread-bindings and unused-parameters passes take it. All frames at once first, then each on
its own; the oracle judges each candidate like any other.
"""

from __future__ import annotations

import ast
import copy

from casekit.reduce.passes.after_break import SCOPES, completed_path, spans
from casekit.reduce.passes.base import Search, Trees, place_made_up_passes

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
BODIES = ("body", "orelse", "finalbody")


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _rebinds(statement: ast.stmt, bound: set[str]) -> bool:
    """Whether the statement only gives names already bound a new value (no attribute or item stored)."""
    if isinstance(statement, ast.AugAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id in bound
    if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = [
            n
            for t in targets
            for n in ast.walk(t)
            if isinstance(n, ast.expr) and not isinstance(n, ast.Tuple | ast.List | ast.Starred)
        ]
        return all(isinstance(n, ast.Name) and n.id in bound for n in names)
    return False


def _cut(body: list[ast.stmt], lines: set[int], bound: set[str]) -> bool:
    """Drop (in place) the rebindings before the statement holding one of `lines`, and recurse into it."""
    last = next((i for i, s in enumerate(body) if any(spans(s, line) for line in lines)), None)
    if last is None or isinstance(body[last], SCOPES):
        return False
    kept: list[ast.stmt] = []
    changed = False
    for statement in body[:last]:
        if _rebinds(statement, bound):
            changed = True
            continue
        bound |= _stored(statement)
        kept.append(statement)
    holder = body[last]
    if isinstance(holder, ast.For | ast.AsyncFor):
        bound |= _stored(holder.target)
    for field in BODIES:
        inner = getattr(holder, field, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
            changed = _cut(inner, lines, set(bound)) or changed
    body[: last + 1] = [*kept, holder]
    return changed


def without_rebindings(trees: Trees, path: list[tuple[str, int]]) -> Trees | None:
    """A copy of the trees without the rebindings before the path's line in each frame (None: none)."""
    out = dict(trees)
    changed = False
    for name in dict.fromkeys(file for file, _ in path):
        tree = trees.get(name)
        if tree is None:
            continue
        new = copy.deepcopy(tree)
        lines = {line for file, line in path if file == name}
        for function in (n for n in ast.walk(new) if isinstance(n, FUNCTIONS)):
            own = {line for line in lines if any(spans(s, line) for s in function.body)}
            inner = [n for n in ast.walk(function) if n is not function and isinstance(n, FUNCTIONS)]
            own = {line for line in own if not any(spans(f, line) for f in inner)}
            arguments = function.args
            params = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
            if own and _cut(function.body, own, params):
                changed = True
        place_made_up_passes(new)
        out[name] = new
    return out if changed else None


def run(search: Search) -> None:
    """All the path's frames at once, then each frame on its own."""
    path = completed_path(search.trees, search.facts.kept_path, search.facts.callers)
    candidate = without_rebindings(search.trees, path)
    if candidate is None or search.ask(candidate) or len(path) == 1:
        return
    for place in path:
        candidate = without_rebindings(search.trees, [place])
        if candidate is not None:
            search.ask(candidate)
