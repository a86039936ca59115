"""The first, coarse pass of the code reduction: whole statements out, body by body, halves first.

pysource-minimize rebuilds and checks the whole tree for every change it tries
(measured on a 118-line train step: 1,821 trees built for 104 candidates run,
80 of the explorer's 114 s), and most of its tries in a large file are
expression edits inside statements a later try deletes anyway. This pass only
deletes statements — from the module body down into the bodies that remain,
parents before children — in chunks that halve (delta debugging's
complement step, from the end of each body, where uses come after
definitions), and replaces a compound statement by its own body (an `if`,
loop, `with` or `try` around the break). A file reduced this way goes to
pysource-minimize small. Pure functions over trees; the explorer asks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Any

from casekit.reduce.passes.after_break import completed_path, spans
from casekit.reduce.passes.base import Search, copy_tree

BODY_FIELDS = ("body", "orelse", "finalbody")
HOISTABLE = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)

Step = tuple[str, int | None]  # a field of a node, and an index into it when it is a list
Path = tuple[Step, ...]  # from the module to a statement list (the last step names the list's field)
Copy = Callable[[Any], Any]
Stays = Callable[[ast.stmt], bool]  # a statement no candidate may take out


def _key(node: ast.AST, field: str) -> tuple[str, int, int, str]:
    """A body's identity across copies: its owner's kind and original place (copies keep line numbers)."""
    return (type(node).__name__, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), field)


def body_paths(tree: ast.Module) -> Iterator[tuple[Path, tuple[str, int, int, str]]]:
    """Every statement list of the tree, outer bodies before inner ones (breadth first)."""
    queue: list[tuple[ast.AST, Path]] = [(tree, ())]
    while queue:
        node, path = queue.pop(0)
        for field in BODY_FIELDS:
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield path + ((field, None),), _key(node, field)
                queue.extend((child, path + ((field, i),)) for i, child in enumerate(value))
        for i, handler in enumerate(getattr(node, "handlers", None) or ()):  # try: except bodies
            queue.append((handler, path + (("handlers", i),)))
        for i, case in enumerate(getattr(node, "cases", None) or ()):  # match: case bodies
            queue.append((case, path + (("cases", i),)))


def statements_at(tree: ast.Module, path: Path) -> list[ast.stmt]:
    node: Any = tree
    for field, index in path:
        node = getattr(node, field)
        if index is not None:
            node = node[index]
    return node  # type: ignore[no-any-return]


def without(
    tree: ast.Module, path: Path, start: int, stop: int, copy: Copy, stays: Stays = lambda statement: False
) -> ast.Module | None:
    """A copy of `tree` without statements [start, stop) of the list at `path` (`pass` if none is left),
    those `stays` names excepted (None: nothing would go)."""
    if all(stays(s) for s in statements_at(tree, path)[start:stop]):
        return None
    new = copy(tree)
    statements = statements_at(new, path)
    owner = statements_at(new, path[:-1]) if len(path) > 1 else new
    removed = statements[start:stop]
    statements[start:stop] = [s for s in removed if stays(s)]
    if not statements and not isinstance(owner, ast.Module):
        place = removed[0]
        statements.append(ast.Pass(lineno=place.lineno, col_offset=place.col_offset))
    return new


def hoisted(tree: ast.Module, path: Path, index: int, copy: Copy) -> ast.Module | None:
    """A copy of `tree` with the compound statement at `path`[index] replaced by its own body."""
    new = copy(tree)
    statements = statements_at(new, path)
    node = statements[index]
    if not isinstance(node, HOISTABLE) or not node.body:
        return None
    statements[index : index + 1] = list(node.body)
    return new


def reduce_statements(
    tree: ast.Module,
    ask: Callable[[ast.Module], bool],
    copy: Copy,
    rounds: int = 3,
    stays: Stays = lambda statement: False,
) -> ast.Module:
    """Delete what `ask` lets go, body by body; the smallest tree kept. `ask` answers for a whole tree.

    Rounds until one deletes nothing: a field set in `__init__` can go only once the line of `forward`
    that reads it has gone, and `__init__`'s body comes first."""
    for _ in range(rounds):
        before = ast.dump(tree)
        done: set[tuple[str, int, int, str]] = set()
        while True:
            found = next(((p, k) for p, k in body_paths(tree) if k not in done), None)
            if found is None:
                break
            path, key = found
            done.add(key)
            tree = _reduce_body(tree, path, ask, copy, stays)
        if ast.dump(tree) == before:
            break
    return tree


def _reduce_body(
    tree: ast.Module, path: Path, ask: Callable[[ast.Module], bool], copy: Copy, stays: Stays
) -> ast.Module:
    size = len(statements_at(tree, path))
    chunk = max(1, size // 2)
    while True:
        stop = len(statements_at(tree, path))
        while stop > 0:
            start = max(0, stop - chunk)
            candidate = without(tree, path, start, stop, copy, stays)
            if candidate is not None and ask(candidate):
                tree = candidate
            stop = start
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    index = len(statements_at(tree, path)) - 1
    while index >= 0:  # an `if`/loop/`with`/`try` around what is left: its body in its place
        unwrapped = hoisted(tree, path, index, copy)
        if unwrapped is not None and ask(unwrapped):
            hoisted_count = len(statements_at(unwrapped, path)) - len(statements_at(tree, path)) + 1
            tree = unwrapped
            index += hoisted_count - 1  # the statements now in its place get their turn (a loop in an if)
            continue
        index -= 1
    return tree


def run(search: Search) -> None:
    """One round over every file, importers first (a file's definition goes once its use has gone). A
    statement that holds a line of the kept break's call path stays: without it the break cannot be
    reached from the same calls, and the oracle would refuse it after a run."""
    facts = search.facts
    path = completed_path(search.trees, facts.kept_path, facts.callers)
    for name in facts.order:
        tree = search.trees.get(name)
        if tree is None:
            continue
        lines = [line for file, line in path if file == name]
        reduce_statements(
            tree,
            lambda candidate: search.ask({name: candidate}),  # noqa: B023 - used at once
            copy_tree,
            rounds=1,
            stays=lambda statement: any(spans(statement, line) for line in lines),  # noqa: B023 - used at once
        )


def importers_first(script: str, texts: dict[str, str]) -> list[str]:
    """The reduced files, each before the files it imports (breadth first from the script; files nothing
    reaches last): a pass then takes a use out before it reaches the definition, in the same round."""
    modules = {_module_of(name): name for name in texts}
    order = [script]
    for name in order:  # grows while it is read
        try:
            tree = ast.parse(texts[name])
        except SyntaxError:
            continue
        for module in _imported(tree, _module_of(name), name.endswith("__init__.py")):
            found = modules.get(module)
            if found is not None and found not in order:
                order.append(found)
    return order + [name for name in texts if name not in order]


def _module_of(path: str) -> str:
    parts = path[: -len(".py")].split("/") if path.endswith(".py") else path.split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Every module an import statement names (and, for `from M import n`, also M.n: n may be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" if base else alias.name for alias in node.names)
