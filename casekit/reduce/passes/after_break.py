"""What follows the break in each frame of its call path, out in one candidate.

Dynamo traces a frame up to the break; what a function does after the line
that leads to the break (the rest of a forward, the loss, the metrics, the
logging after the compiled call) cannot decide whether that break happens. The
kept break names its call path through the user's files (the frames Dynamo
traced, plus where the compiled entry point was called); in each of those
functions this cuts every statement that follows the path's line, at every
level of nesting (a loop keeps its header and iterates as before, and the tail
that can end it). Since no function on the path returns a value any more, the
path's statement in each caller keeps its call but not the result
(`x, aux = block(x)` -> `block(x)`). A bolder variant also runs each loop
around the compiled call once, so that what fed the loop (a dataset, a
batching generator) is unread; on top of the cut, the unread-bindings pass
(`unread.py`) takes what only fed what is gone. The oracle judges each variant
like any other candidate: a break that needed a returned value, or the second
iteration, makes it refused, and nothing is lost but a run.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Collection, Iterable, Mapping

from casekit.reduce.passes.base import Search, Trees, place_made_up_passes
from casekit.reduce.passes.loops import run_once
from casekit.reduce.passes.unread import without_unread

BODIES = ("body", "orelse", "finalbody")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)


def spans(node: ast.AST, line: int) -> bool:
    """Whether `node` holds `line` (its decorators included)."""
    start = _first_line(node)
    return start <= line <= (getattr(node, "end_lineno", None) or start)


def _innermost_scope(tree: ast.Module, line: int) -> ast.AST:
    """The function (or the module) whose own code holds `line`; a class body counts as no frame."""
    scope: ast.AST = tree
    node: ast.AST = tree
    while True:
        inner = next((c for c in _statements_of(node) if spans(c, line)), None)
        if inner is None:
            return scope
        if isinstance(inner, SCOPES):
            scope = inner
        node = inner


def _statements_of(node: ast.AST) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for field in BODIES:
        inner = getattr(node, field, None)
        if isinstance(inner, list):
            out.extend(s for s in inner if isinstance(s, ast.stmt))
    for handler in getattr(node, "handlers", None) or []:
        out.extend(handler.body)
    return out


def _bodies_of(statement: ast.stmt) -> list[list[ast.stmt]]:
    out = [b for f in BODIES if isinstance(b := getattr(statement, f, None), list) and b and isinstance(b[0], ast.stmt)]
    out.extend(handler.body for handler in getattr(statement, "handlers", None) or [])
    return out


def _exits_loop(statements: list[ast.stmt]) -> bool:
    """Whether a `break` of the loop these statements are in is among them (inner loops' own excluded)."""
    pending: list[ast.AST] = list(statements)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Break):
            return True
        if not isinstance(node, (*LOOPS, *SCOPES, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _cut(body: list[ast.stmt], lines: set[int], unroll: set[int], in_loop: bool = False) -> bool:
    """Cut `body` (in place) after its last statement holding one of `lines`, and recurse into it; a loop
    holding a line in `unroll` is replaced by its body. A loop's body keeps a tail that can end the loop
    (`while True: ... break`), since without it the loop would never end. True when `body` holds a line."""
    last = max((i for i, s in enumerate(body) if any(spans(s, line) for line in lines)), default=None)
    if last is None:
        return False
    statement = body[last]
    if not (in_loop and _exits_loop(body[last + 1 :])):
        del body[last + 1 :]
    if isinstance(statement, SCOPES):
        return True  # another frame's lines: its own cut is made from its own scope
    unrolled = isinstance(statement, LOOPS) and any(spans(statement, line) for line in unroll)
    for inner in _bodies_of(statement):
        own_loop = isinstance(statement, LOOPS) and inner is statement.body and not unrolled
        _cut(inner, lines, unroll, own_loop or in_loop)
    if unrolled and isinstance(statement, ast.For):  # once: its target bound to the first item, then its body
        body[last : last + 1] = run_once(statement)
    elif unrolled and isinstance(statement, LOOPS):
        body[last : last + 1] = statement.body  # once, in place of the loop (its `else` goes)
    return True


def _first_line(node: ast.AST) -> int:
    return min([getattr(node, "lineno", 0), *(d.lineno for d in getattr(node, "decorator_list", ()))])


def completed_path(
    trees: Mapping[str, ast.Module | None],
    path: Iterable[tuple[str, int]],
    callers: Mapping[tuple[str, int], Collection[tuple[str, int]]],
    most: int = 64,
) -> list[tuple[str, int]]:
    """The path with every caller that led to its frames (the eager run's `callers`: a function's first
    line -> where it was called from), up to the module: Dynamo's stack of a break in a frame it
    resumed starts below the callers, and each of them passes the call on."""
    out = list(dict.fromkeys(path))
    pending = list(out)
    while pending and len(out) < most:
        name, line = pending.pop()
        tree = trees.get(name)
        scope = _innermost_scope(tree, line) if tree is not None else None
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for place in sorted(callers.get((name, _first_line(scope)), ())):
            if place not in out:
                out.append(place)
                pending.append(place)
    return out


def _calls_in(value: ast.expr) -> list[ast.Call]:
    """The calls of an expression that no other call of it holds (`x + self.attn(self.norm(x))`: the
    attention's call), in reading order."""
    if isinstance(value, ast.Call):
        return [value]
    found: list[ast.Call] = []
    for child in ast.iter_child_nodes(value):
        if isinstance(child, ast.expr) and not isinstance(child, ast.Lambda):
            found.extend(_calls_in(child))
    return found


def _without_results(body: list[ast.stmt], lines: set[int]) -> None:
    """Each simple statement holding one of `lines` that keeps or returns a value (`x, aux = block(x)`,
    `return self.head(h)`, `x = x + self.attn(h)`) becomes its calls alone, each a statement: the callee
    no longer returns a value, so nothing may use it."""
    for i in reversed(range(len(body))):
        statement = body[i]
        if not any(spans(statement, line) for line in lines) or isinstance(statement, SCOPES):
            continue
        value = getattr(statement, "value", None)
        if (
            isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Return | ast.Expr)
            and value is not None
        ):
            calls = _calls_in(value)
            if calls or not isinstance(statement, ast.Expr):
                alone: list[ast.stmt] = [ast.copy_location(ast.Expr(value=call), statement) for call in calls]
                body[i : i + 1] = alone or [ast.copy_location(ast.Pass(), statement)]
        for inner in _bodies_of(statement):
            _without_results(inner, lines)


def without_what_follows(
    trees: Mapping[str, ast.Module | None],
    path: Iterable[tuple[str, int]],
    drivers: Iterable[tuple[str, int]] = (),
    unroll_drivers: bool = False,
) -> dict[str, ast.Module | None]:
    """A copy of the trees where each function on the break's call path (`path`: file and line of each
    frame, in the original's lines; `drivers`: where the compiled entry point was called) ends with the
    statement its path line is in, and that statement keeps no value (each function it calls on the
    path returns none now). With `unroll_drivers`, each loop around a driver line runs once."""
    by_file: dict[str, set[int]] = {}
    for name, line in [*path, *drivers]:
        by_file.setdefault(name, set()).add(line)
    unroll = {(name, line) for name, line in drivers} if unroll_drivers else set()
    out = dict(trees)
    for name, lines in by_file.items():
        tree = trees.get(name)
        if tree is None:
            continue
        cut = copy.deepcopy(tree)
        scopes: dict[int, tuple[ast.AST, set[int]]] = {}
        for line in lines:
            scope = _innermost_scope(cut, line)
            if not isinstance(scope, ast.ClassDef):
                scopes.setdefault(id(scope), (scope, set()))[1].add(line)
        for scope, own in scopes.values():
            body = scope.body if isinstance(scope, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef) else []
            _cut(body, own, {line for n, line in unroll if n == name and line in own})
            _without_results(body, own)
        place_made_up_passes(cut)
        out[name] = cut
    return out


def run(search: Search) -> None:
    """The cut's variants, boldest first (the first kept wins): in every frame of the path or only after
    the compiled call, the loops around that call once or not, and what is then unread out with or
    without its calls."""
    facts = search.facts
    path = completed_path(search.trees, facts.kept_path, facts.callers)
    drivers = [(call.file, call.line) for call in facts.calls]
    seen: list[Trees] = []
    for frames, unroll, drop_calls in (
        (path, True, True),
        (path, False, True),
        (path, False, False),
        ((), False, False),
    ):
        cut = without_what_follows(search.trees, frames, drivers, unroll)
        trees = without_unread(cut, facts.script, drop_calls, facts.compiled_calls)
        if any(_same(trees, earlier) for earlier in seen) or _same(trees, search.trees):
            continue
        seen.append(trees)
        if search.ask(trees):
            return


def _same(one: Trees, other: Trees) -> bool:
    return all(
        (a is None) == (b is None) and (a is None or b is None or ast.dump(a) == ast.dump(b))
        for a, b in ((one.get(n), other.get(n)) for n in {*one, *other})
    )
