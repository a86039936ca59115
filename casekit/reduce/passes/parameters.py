"""Unused parameters out, with the arguments passed for them: `Router(config)` -> `Router()`.

Once the code that read a parameter has gone, the parameter stays in the signature and every caller
still builds and passes a value for it; a reducer that only deletes code leaves `def __init__(self,
cfg)` with `cfg` unused and calls that pass `0` for it. Here a parameter that its function's body
never reads goes, and so does the argument at each call of that function: calls by its name (a
function, a class for its `__init__`, `.name(...)` for a method) and, for what is called through
something else (a module's `forward` through `nn.Module.__call__`, a compiled function through what
`torch.compile` returned), the calls on the lines the original's eager run recorded as its callers,
those whose arguments fit the signature. All unused parameters at once first, then each function's,
then each one's; again while a round frees more (`Block(config)` gone, `Model.__init__`'s `config`
is unused too). The oracle judges each candidate, so a call found wrongly costs one run, never a
wrong result.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import dataclass

from casekit.reduce.passes.base import Search, Trees, copy_tree

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Signature:
    """What finds a function's calls: its name, its class (a method), the positional arguments a call
    must and may pass."""

    name: str
    owner: str | None
    required: int
    most: int


@dataclass(frozen=True)
class Unused:
    """One unused parameter: its function's place, its name, its position (None: keyword-only)."""

    file: str
    function: tuple[int, int]  # (line, column) of the def
    first_line: int  # the def's first line, decorators included (what the caller records name)
    name: str  # the function's name
    owner: str | None  # its class, for a method
    parameter: str
    position: int | None  # among the arguments a caller passes (self not counted)
    required: int  # positional arguments a call must pass
    most: int  # positional arguments a call may pass

    @property
    def signature(self) -> Signature:
        return Signature(self.name, self.owner, self.required, self.most)


def _is_static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)


def functions(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    pending: list[tuple[ast.AST, str | None]] = [(tree, None)]
    while pending:
        node, owner = pending.pop(0)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FUNCTIONS):
                yield child, owner
                pending.append((child, None))
            elif isinstance(child, ast.ClassDef):
                pending.append((child, child.name))
            elif isinstance(child, ast.stmt):
                pending.append((child, owner))


def unused_parameters(trees: Trees) -> list[Unused]:
    """Every parameter a function's body never reads (a method's `self`, `*args` and `**kwargs` stay)."""
    found = []
    for file, tree in trees.items():
        for function, owner in functions(tree) if tree is not None else ():
            arguments = function.args
            if arguments.vararg or arguments.kwarg:
                continue  # a call may pass anything: its arguments cannot be matched
            read = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
            if read & {"locals", "vars"}:
                continue
            positional = [*arguments.posonlyargs, *arguments.args]
            bound = 1 if owner is not None and not _is_static(function) and positional else 0
            passed = positional[bound:]
            required = len(passed) - len(arguments.defaults)
            first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
            place = (function.lineno, function.col_offset)
            for position, argument in enumerate(passed):
                if argument.arg not in read:
                    found.append(
                        Unused(file, place, first, function.name, owner, argument.arg, position, required, len(passed))
                    )
            for argument in arguments.kwonlyargs:
                if argument.arg not in read:
                    found.append(
                        Unused(file, place, first, function.name, owner, argument.arg, None, required, len(passed))
                    )
    return found


def signature(function: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None) -> Signature:
    """The function's signature as its callers see it (a method's `self` is not passed)."""
    positional = [*function.args.posonlyargs, *function.args.args]
    bound = 1 if owner is not None and not _is_static(function) and positional else 0
    return Signature(
        function.name, owner, len(positional) - bound - len(function.args.defaults), len(positional) - bound
    )


def _fits(call: ast.Call, callee: Signature) -> bool:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return False
    given = len(call.args) + sum(1 for k in call.keywords if k.arg is not None)
    return len(call.args) <= callee.most and given >= callee.required


def _named(call: ast.Call, callee: Signature) -> bool:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if callee.owner is None:
        return name == callee.name
    if callee.name == "__init__":
        return name == callee.owner
    return isinstance(func, ast.Attribute) and func.attr == callee.name


def calls_of(trees: Trees, callee: Signature, callers: frozenset[tuple[str, int]]) -> Iterator[ast.Call]:
    """The calls of a function: by its name (a function, a class for its `__init__`, `.name(...)` for a
    method), and through an instance at `callers` (the lines the original's run recorded calling it)."""
    # called through something else: a module's forward through nn.Module.__call__, a function through
    # what holds it (`step_fn = torch.compile(train_step)`, `torch.compile(train_step)(...)`)
    through_instance = callee.owner is None or callee.name == "forward"
    known = _known_names(trees) if through_instance else frozenset()
    for file, tree in trees.items():
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and _fits(node, callee):
                if _named(node, callee) or (
                    through_instance and (file, node.lineno) in callers and _instance_call(node, known)
                ):
                    yield node


def _known_names(trees: Trees) -> frozenset[str]:
    """What a call by name cannot be an instance's call of: the files' functions, classes and imports,
    and the builtins (`range(...)`, `torch.compile(...)` on a caller's line are not the module's call)."""
    names = set(dir(builtins))
    for tree in trees.values():
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _instance_call(call: ast.Call, known: frozenset[str]) -> bool:
    """A call of something held in a name or an attribute (`block(x)`, `self.attn(h)`), not of a function,
    a class, a builtin or a module's attribute."""
    root = call.func
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name):
        return root.id not in known or root.id == "self"
    return isinstance(root, ast.Call | ast.Subscript)  # `torch.compile(m)(x)`, `self.blocks[0](x)`


def without_parameters(trees: Trees, chosen: list[Unused], search: Search) -> Trees:
    """A copy of the trees without the chosen parameters and the arguments passed for them."""
    new: Trees = {name: copy_tree(tree) for name, tree in trees.items()}
    # every call is found before any argument goes (a call's arguments are matched to the signature)
    cuts: dict[int, tuple[ast.Call, list[Unused]]] = {}
    for unused in chosen:
        callers = search.facts.callers.get((unused.file, unused.first_line), frozenset())
        for call in calls_of(new, unused.signature, frozenset(callers)):
            cuts.setdefault(id(call), (call, []))[1].append(unused)
    for call, gone in cuts.values():
        names = {u.parameter for u in gone}
        call.keywords = [k for k in call.keywords if k.arg not in names]
        for position in sorted({u.position for u in gone if u.position is not None}, reverse=True):
            if position < len(call.args):
                del call.args[position]
    for unused in chosen:
        tree = new[unused.file]
        assert tree is not None
        function = next(f for f, _ in functions(tree) if (f.lineno, f.col_offset) == unused.function)
        _drop_parameter(function.args, unused.parameter)
    return new


def _drop_parameter(arguments: ast.arguments, name: str) -> None:
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    kept = [(a, d) for a, d in zip(positional, defaults, strict=True) if a.arg != name]
    posonly = len([a for a in arguments.posonlyargs if a.arg != name])
    arguments.posonlyargs = [a for a, _ in kept[:posonly]]
    arguments.args = [a for a, _ in kept[posonly:]]
    first_default = next((i for i, (_, d) in enumerate(kept) if d is not None), len(kept))
    arguments.defaults = [d for _, d in kept[first_default:] if d is not None]
    pairs = [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if a.arg != name]
    arguments.kwonlyargs = [a for a, _ in pairs]
    arguments.kw_defaults = [d for _, d in pairs]


ROUNDS = 3  # a parameter that only fed another function's unused one is unused once that one goes


def run(search: Search) -> None:
    for _ in range(ROUNDS):
        before = {(u.file, u.function, u.parameter) for u in unused_parameters(search.trees)}
        _one_round(search)
        after = {(u.file, u.function, u.parameter) for u in unused_parameters(search.trees)}
        if not after or after == before:
            return


def _one_round(search: Search) -> None:
    found = unused_parameters(search.trees)
    if not found or search.ask(without_parameters(search.trees, found, search)):
        return
    functions = list(dict.fromkeys((u.file, u.function) for u in found))
    for function in functions:
        mine = [u for u in unused_parameters(search.trees) if (u.file, u.function) == function]
        if not mine or search.ask(without_parameters(search.trees, mine, search)) or len(mine) == 1:
            continue
        for parameter in [u.parameter for u in mine]:
            again = [
                u
                for u in unused_parameters(search.trees)
                if (u.file, u.function, u.parameter) == (*function, parameter)
            ]
            if again:
                search.ask(without_parameters(search.trees, again, search))
