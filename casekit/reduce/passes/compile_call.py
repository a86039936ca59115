"""The compile call as the original wrote it: its backend, mode and other keywords back.

Every run of a reduction forces its backend (`--backend`, eager by default) over the one the script
names, so the library's steps may drop `backend="eager"` or `mode=...` at no cost, and a plain
`python reduced.py` would then compile with inductor. Here each `torch.compile` call kept gets back
every keyword the original's call wrote. When the original named neither a backend nor a mode and
the reduction ran on the eager backend, the break was shown without inductor: the call says
`backend="eager"`, and a comment on its line says why (the finished rendering writes the note).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from casekit.reduce.passes.base import Search, Trees, copy_tree
from casekit.reduce.source.finish import NOTE

EAGER_NOTE = "the break is Dynamo's: it shows without inductor (casekit reduce ran it with backend='eager')"


def compile_calls(tree: ast.Module) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "compile" and ast.unparse(func.value) == "torch":
                yield node
            elif isinstance(func, ast.Name) and func.id == "compile" and _imports_compile(tree):
                yield node


def _imports_compile(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.ImportFrom) and n.module == "torch" and any(a.name == "compile" for a in n.names)
        for n in ast.walk(tree)
    )


def _original_call(call: ast.Call, originals: list[ast.Call]) -> ast.Call | None:
    """The original call this one is: the one at its place, else the only one there was."""
    same = [
        o
        for o in originals
        if (o.lineno, o.col_offset) == (getattr(call, "lineno", -1), getattr(call, "col_offset", -1))
    ]
    if same:
        return same[0]
    return originals[0] if len(originals) == 1 else None


def as_written(trees: Trees, originals: dict[str, ast.Module], backend: str) -> Trees | None:
    """A copy of the trees whose compile calls have the original's keywords (None: nothing to change)."""
    out = dict(trees)
    changed = False
    for file, tree in trees.items():
        original = originals.get(file)
        if tree is None or original is None:
            continue
        written = list(compile_calls(original))
        new = copy_tree(tree)
        for call in compile_calls(new):
            source = _original_call(call, written)
            if source is None:
                continue
            present = {k.arg: ast.dump(k.value) for k in call.keywords if k.arg is not None}
            wanted = [k for k in source.keywords if k.arg is not None]
            if any(present.get(str(k.arg)) != ast.dump(k.value) for k in wanted):
                names = {k.arg for k in wanted}
                call.keywords = [k for k in call.keywords if k.arg not in names]
                call.keywords += [_placed_at(copy_tree(k), call) for k in wanted]
                changed = True
            names = {k.arg for k in call.keywords}
            if backend == "eager" and "backend" not in names and "mode" not in names and not callable_backend(call):
                call.keywords.append(ast.keyword(arg="backend", value=ast.Constant(value="eager")))
                setattr(call, NOTE, EAGER_NOTE)
                changed = True
        out[file] = new
    return out if changed else None


def _placed_at(keyword: ast.keyword, call: ast.Call) -> ast.keyword:
    """The original's keyword at the kept call's place, its value included: a value keeping the original's
    line would map the kept statement to the compile call's old line, and the oracle would read the
    break's call path as reached from another call site (the call is often inlined elsewhere by then)."""
    for node in ast.walk(keyword):
        ast.copy_location(node, call)
    return keyword


def callable_backend(call: ast.Call) -> bool:
    """A backend passed as the second positional argument (`torch.compile(model, my_backend)` is rare)."""
    return len(call.args) > 1


def run(search: Search) -> None:
    originals = {name: ast.parse(text) for name, text in search.facts.originals.items()}
    candidate = as_written(search.trees, originals, search.facts.backend)
    if candidate is not None:
        search.ask(candidate)
