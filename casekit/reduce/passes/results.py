"""Unused results out, with the names bound to them: `weights, experts, aux = self.router(t)` where only
`experts` is read any more -> `experts = self.router(t)`, and the router returns `experts` alone.

Once a cut has taken what read them (what follows the break, the loss, the logging), the other parts of
a returned tuple are still computed, returned and unpacked: a deletion-only reducer cannot take a name
out of the unpacking without changing its count, and pysource-minimize leaves `return (0, experts, 0)`.
Here a function whose every return is a tuple of the same length, and whose every call found is
unpacked into that many plain names, loses the positions that no caller reads, from its returns and
from every unpacking at once; what computed them is then unread (`unread.py` takes it). The calls are
found as the unused-parameters pass finds them (by name, or through an instance at the callers the
original's run recorded); the oracle judges each candidate, so a call missed costs one run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from casekit.reduce.passes.base import Search, Trees, copy_tree
from casekit.reduce.passes.parameters import FUNCTIONS, calls_of, functions, signature

SCOPES = (*FUNCTIONS, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class UnusedResults:
    """A function whose returned tuple has parts no caller reads: its place and those parts' positions."""

    file: str
    function: tuple[int, int]  # (line, column) of the def
    unread: tuple[int, ...]  # positions of the returned tuple that no unpacking reads
    size: int  # the tuple's length


def _own_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    found: list[ast.Return] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        if not isinstance(node, SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return found


def _parents(trees: Trees) -> dict[int, ast.AST]:
    return {
        id(child): node
        for tree in trees.values()
        if tree is not None
        for node in ast.walk(tree)
        for child in ast.iter_child_nodes(node)
    }


def _scope_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    scope = parents.get(id(node))
    while scope is not None and not isinstance(scope, (*FUNCTIONS, ast.Module)):
        scope = parents.get(id(scope))
    assert scope is not None
    return scope


def _reads(scope: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(scope) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}


def _unpackings(trees: Trees, calls: list[ast.Call], size: int) -> list[ast.Assign] | None:
    """The assignment each call is unpacked by (`a, b = f(x)`, plain names, `size` of them); None when
    a call is used any other way."""
    parents = _parents(trees)
    found = []
    for call in calls:
        statement = parents.get(id(call))
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(target := statement.targets[0], ast.Tuple | ast.List)
            and len(target.elts) == size
            and all(isinstance(e, ast.Name) for e in target.elts)
        ):
            return None
        found.append(statement)
    return found


def unused_results(trees: Trees, callers: dict[tuple[str, int], frozenset[tuple[str, int]]]) -> list[UnusedResults]:
    """Every function returning a tuple whose parts some position of which no caller reads."""
    found = []
    parents = _parents(trees)
    for file, tree in trees.items():
        for function, owner in functions(tree) if tree is not None else ():
            returns = _own_returns(function)
            sizes = {len(r.value.elts) if isinstance(r.value, ast.Tuple) else -1 for r in returns}
            if len(sizes) != 1 or (size := sizes.pop()) < 2:
                continue
            first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
            calls = list(calls_of(trees, signature(function, owner), callers.get((file, first), frozenset())))
            unpackings = _unpackings(trees, calls, size) if calls else None
            if unpackings is None:
                continue
            unread = tuple(
                position
                for position in range(size)
                if all(_name_at(u, position) not in _reads(_scope_of(u, parents)) for u in unpackings)
            )
            if unread and len(unread) < size:
                found.append(UnusedResults(file, (function.lineno, function.col_offset), unread, size))
    return found


def _name_at(unpacking: ast.Assign, position: int) -> str:
    target = unpacking.targets[0]
    assert isinstance(target, ast.Tuple | ast.List)
    name = target.elts[position]
    assert isinstance(name, ast.Name)
    return name.id


def _kept(items: list[ast.expr], unread: tuple[int, ...], whole: ast.expr) -> ast.expr:
    """The items left; one alone is itself, not a tuple of one."""
    left = [item for position, item in enumerate(items) if position not in unread]
    if len(left) == 1:
        return left[0]
    return ast.copy_location(type(whole)(elts=left, ctx=whole.ctx), whole)  # type: ignore[call-arg, attr-defined]


def without_results(trees: Trees, chosen: UnusedResults, search: Search) -> Trees | None:
    """A copy of the trees without the chosen function's unread results, at its returns and its callers
    (None: the function or its calls are not as they were found)."""
    new: Trees = {name: copy_tree(tree) for name, tree in trees.items()}
    tree = new[chosen.file]
    if tree is None:
        return None
    found = next(((f, o) for f, o in functions(tree) if (f.lineno, f.col_offset) == chosen.function), None)
    if found is None:
        return None
    function, owner = found
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    callers = search.facts.callers.get((chosen.file, first), frozenset())
    calls = list(calls_of(new, signature(function, owner), callers))
    unpackings = _unpackings(new, calls, chosen.size) if calls else None
    if unpackings is None:
        return None
    for unpacking in unpackings:
        target = unpacking.targets[0]
        assert isinstance(target, ast.Tuple | ast.List)
        unpacking.targets = [_kept(target.elts, chosen.unread, target)]
    for returned in _own_returns(function):
        assert isinstance(returned.value, ast.Tuple)
        returned.value = _kept(returned.value.elts, chosen.unread, returned.value)
    function.returns = _kept_annotation(function.returns, chosen)
    return new


def _kept_annotation(returns: ast.expr | None, chosen: UnusedResults) -> ast.expr | None:
    """`-> tuple[A, B, C]` says what is returned now: `-> B` where B alone is left, `-> tuple[A, C]` for
    more; an annotation written another way (a name for the tuple's type) no longer tells, and goes."""
    if returns is None:
        return None
    if (
        isinstance(returns, ast.Subscript)
        and isinstance(returns.value, ast.Name)
        and returns.value.id in ("tuple", "Tuple")
        and isinstance(returns.slice, ast.Tuple)
        and len(returns.slice.elts) == chosen.size
    ):
        left = [item for position, item in enumerate(returns.slice.elts) if position not in chosen.unread]
        if len(left) == 1:
            return left[0]
        returns.slice = ast.copy_location(ast.Tuple(elts=left, ctx=ast.Load()), returns.slice)
        return returns
    return None


def _each(search: Search) -> Iterator[UnusedResults]:
    tried: set[tuple[str, tuple[int, int]]] = set()
    while True:
        pending = [u for u in unused_results(search.trees, search.facts.callers) if (u.file, u.function) not in tried]
        if not pending:
            return
        tried.add((pending[0].file, pending[0].function))
        yield pending[0]


def without_stale_annotations(trees: Trees) -> Trees | None:
    """A copy of the trees where a function that returns no value any more (its returns went with what
    followed the break) says nothing of what it returns: `-> torch.Tensor` over a body that ends in a
    call would mislead the reader (None: there is no such function)."""
    new: Trees = {name: copy_tree(tree) for name, tree in trees.items()}
    changed = False
    for tree in new.values():
        for function in (n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)) if tree is not None else ():
            if function.returns is None or _yields(function) or _is_none(function.returns):
                continue
            if not any(r.value is not None for r in _own_returns(function)) and not _abstract(function):
                function.returns = None
                changed = True
    return new if changed else None


def _yields(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _is_none(annotation: ast.expr) -> bool:
    return isinstance(annotation, ast.Constant) and annotation.value is None


def _abstract(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body that only raises or is `...`/`pass` (a stub, an abstract method): its annotation is the point."""
    return all(
        isinstance(s, ast.Raise | ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        for s in function.body
    )


def run(search: Search) -> None:
    """Each function's unread results out, one function at a time (a caller's own results may then be
    unread in turn: the pipeline repeats the step with the unread bindings); then the return annotations
    of functions left returning nothing."""
    for chosen in _each(search):
        candidate = without_results(search.trees, chosen, search)
        if candidate is not None:
            search.ask(candidate)
    stale = without_stale_annotations(search.trees)
    if stale is not None:
        search.ask(stale)
