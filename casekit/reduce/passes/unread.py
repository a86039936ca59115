"""One candidate without every binding nothing reads: what only fed code that is gone.

Once the compiled call's inputs are literals (`arguments.py`), the tokenizer,
the dataset and the batching helpers are still defined and still called to
make values nobody reads. This removes, to a fixed point, every statement that
only binds names no code reads: an import, a `def` or `class`, an assignment
to plain names (its right side goes with it, calls included). A name counts as
read where any scope loads it or an attribute of that name is taken, so a
method name read as `obj.name` stays. The oracle judges the one candidate
like any other: a call kept only for its side effect that the break needed
makes it refused, and nothing is lost but one run.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping

from casekit.reduce.passes.base import Search, place_made_up_passes

BODIES = ("body", "orelse", "finalbody")


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a scope's own code: nested functions' bodies excluded (their defaults included)."""
    out: list[ast.AST] = []
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        out.append(node)
        if isinstance(node, FUNCTIONS):
            pending.extend([*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)])
            pending.extend(getattr(node, "decorator_list", []))
            continue
        pending.extend(ast.iter_child_nodes(node))
    return out


def _locals(function: ast.AST) -> set[str]:
    assert isinstance(function, FUNCTIONS)
    arguments = function.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    names |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    declared = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
    return names - declared


def _loads(nodes: list[ast.AST]) -> set[str]:
    read: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            read.add(node.id)
        elif isinstance(node, ast.Attribute):
            read.add(node.attr)  # `obj.name`: a method or field of that name stays
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            read.add(node.value)  # getattr(obj, "name"), __all__ entries
    return read


def _reads(tree: ast.Module) -> dict[int, set[str]]:
    """id(scope) -> the names read as that scope's bindings: the module's are read by its own code and
    by any function that does not bind them itself; a function's by its own code and nested code."""
    functions = [n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)]
    module_reads = _loads(_own_nodes(tree))
    out: dict[int, set[str]] = {}
    for function in functions:
        # its own code and nested code: the plain names it loads (a local is never read as `obj.name`, so
        # `capacity = self.capacity(n)` left unread goes although the method's name is taken)
        inside = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
        out[id(function)] = inside
        module_reads |= _loads(_own_nodes(function)) - _locals(function)
    out[id(tree)] = module_reads
    return out


def _bound(statement: ast.stmt) -> list[str] | None:
    """The names a statement only binds, or None when it does more (or binds something else)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        names = [_alias_binds(a) for a in statement.names]
        return None if "*" in names else names
    if isinstance(statement, ast.Assign):
        groups = [_names_of(t) for t in statement.targets]
        return None if any(g is None for g in groups) else [name for group in groups if group for name in group]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    return None


def _alias_binds(alias: ast.alias) -> str:
    """The name an import binds: `import a.b` binds `a`, `from m import x as y` binds `y`."""
    return (alias.asname or alias.name).split(".")[0]


def _names_of(target: ast.expr) -> list[str] | None:
    """The plain names a target binds (`x`, `step, batch`), or None when it also stores elsewhere."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        names = [_names_of(t) for t in target.elts]
        return None if any(n is None for n in names) else [name for group in names if group for name in group]
    return None


def _has_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


def _makes_call(node: ast.AST, calls: frozenset[tuple[int, int | None]]) -> bool:
    """Whether `node` holds one of the compiled entry point's recorded calls (line, column if known)."""
    return any(
        isinstance(n, ast.Call) and ((n.lineno, n.col_offset) in calls or (n.lineno, None) in calls)
        for n in ast.walk(node)
    )


def _prune(
    body: list[ast.stmt],
    reads: dict[int, set[str]],
    scope: ast.AST,
    in_class: bool,
    drop_calls: bool,
    compiled_calls: frozenset[tuple[int, int | None]],
) -> bool:
    """Drop from `body` (in place) the statements binding only names `scope` never reads; True if any.
    An unread assignment whose value calls something keeps its value as a statement, unless
    `drop_calls` and `scope` is where the compiled entry point is called (`compiled_calls`: where the
    original called it) and the value does not hold that call."""
    kept: list[ast.stmt] = []
    changed = False
    read = reads[id(scope)]
    for statement in body:
        names = _bound(statement)
        dunder = names is not None and any(n.startswith("__") and n.endswith("__") for n in names)
        # a class body's defs are methods and fields: `self.name` reads them, and protocols (forward,
        # __init__) call them unread, so only module and function bodies lose their unread bindings
        if isinstance(statement, ast.Import | ast.ImportFrom) and names is not None and not in_class:
            # `from layers import Conv, Pool` where only Pool is read: the import keeps Pool alone
            used = [alias for alias in statement.names if _alias_binds(alias) in read]
            if used and len(used) < len(statement.names):
                statement.names = used
                changed = True
        if names is not None and not in_class and not dunder and not set(names) & read:
            changed = True
            value = getattr(statement, "value", None)
            # only beside the compiled call are unread values inputs the literals replaced; elsewhere
            # (a forward, `result = main()`) an unread call's value may be where the break is
            driver = drop_calls and any(
                isinstance(n, ast.Call) and _makes_call(n, compiled_calls) for n in _own_nodes(scope)
            )
            if isinstance(statement, ast.Assign | ast.AnnAssign) and value is not None and _has_call(value):
                if not driver or _makes_call(value, compiled_calls):
                    kept.append(ast.copy_location(ast.Expr(value=value), statement))
            continue
        inner_scope = statement if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) else scope
        for field in BODIES:
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                if _prune(inner, reads, inner_scope, isinstance(statement, ast.ClassDef), drop_calls, compiled_calls):
                    if not inner and field == "body":
                        inner.append(ast.Pass())
                    changed = True
        kept.append(statement)
    body[:] = kept
    return changed


def without_unread(
    trees: Mapping[str, ast.Module | None],
    script: str,
    drop_calls: bool,
    compiled_calls: frozenset[tuple[int, int | None]] = frozenset(),
) -> dict[str, ast.Module | None]:
    """A copy of the trees without the bindings nothing reads, to a fixed point over every file. An included
    module's top-level names are read where its own code reads them or another file could reach them (see
    `_read_from_outside`); the script's unread calls beside the compiled call (`drop_calls`) are judged in
    the script alone, whose lines `compiled_calls` are in."""
    if trees.get(script) is None:
        return dict(trees)
    out = {name: copy.deepcopy(tree) for name, tree in trees.items()}
    pruned_any = set()
    changed = True
    while changed:
        changed = False
        for name, tree in out.items():
            outside = _read_from_outside(out, name) if name != script else set()
            if tree is None or outside is None:
                continue  # a star import elsewhere may read any of its names
            own = name == script
            reads = _reads(tree)
            reads[id(tree)] |= outside
            if _prune(tree.body, reads, tree, False, drop_calls and own, compiled_calls if own else frozenset()):
                changed = True
                pruned_any.add(name)
    rewritten = pruned_any | {script}  # the rest stay the caller's own trees
    for name in rewritten:
        tree = out[name]
        if tree is not None:
            if not tree.body:
                tree.body = [ast.Pass()]
            place_made_up_passes(tree)
    return {name: out[name] if name in rewritten else trees[name] for name in trees}


def _read_from_outside(trees: Mapping[str, ast.Module | None], name: str) -> set[str] | None:
    """The names of module `name` that other files could reach: imported by name (`from m import x`), read
    as an attribute (`m.x`, any attribute of that name: conservative), or named in a string (getattr).
    None where another file star-imports: then anything may be read."""
    read: set[str] = set()
    for other, tree in trees.items():
        if other == name or tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    return None
                read.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute):
                read.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                read.add(node.value)
    return read


PROTOCOL_METHODS = frozenset({"forward", "extra_repr", "reset_parameters"})  # called by the library, unread


def _store_root(target: ast.expr) -> str | None:
    """The attribute of `self` a store target writes into (`self.head` of `self.head.weight = w`)."""
    chain = target
    while isinstance(chain, ast.Attribute | ast.Subscript):
        if isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Name) and chain.value.id == "self":
            return chain.attr
        chain = chain.value
    return None


def _attribute_reads(trees: Mapping[str, ast.Module | None]) -> set[str]:
    """Attribute names read anywhere, the reads that only lead to a store (`self.head` in `self.head.weight
    = w`) excepted; identifier strings count (`register_buffer("cos", ...)`, getattr)."""
    read: set[str] = set()
    for tree in trees.values():
        leading: set[int] = set()
        for node in ast.walk(tree) if tree is not None else ():
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for target in targets:
                chain = target.value if isinstance(target, ast.Attribute | ast.Subscript) else None
                while isinstance(chain, ast.Attribute | ast.Subscript):
                    leading.add(id(chain))
                    chain = chain.value
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in leading:
                read.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                read.add(node.id)  # a method passed by name inside its class: rare, kept
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                read.add(node.value)
    return read


def _prune_members(body: list[ast.stmt], read: set[str], in_class: bool) -> bool:
    kept: list[ast.stmt] = []
    changed = False
    for statement in body:
        if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            roots = [_store_root(t) for t in targets]
            if all(r is not None and r not in read for r in roots):
                changed = True
                continue
        if in_class and isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            name = statement.name
            if (
                name not in read
                and name not in PROTOCOL_METHODS
                and not (name.startswith("__") and name.endswith("__"))
            ):
                changed = True
                continue
        for field in BODIES:
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                if _prune_members(inner, read, isinstance(statement, ast.ClassDef)):
                    changed = True
                    if not inner and field == "body":
                        inner.append(ast.Pass())
        kept.append(statement)
    body[:] = kept
    return changed


def without_unread_members(trees: Mapping[str, ast.Module | None]) -> dict[str, ast.Module | None]:
    """A copy of the trees without what no code reads of its objects: `self.<name> = ...` where no file
    reads `.name` (a submodule built but no longer called: what follows the break went), and methods no
    file names (`forward` and the dunders stay: the library calls them)."""
    out = {name: copy.deepcopy(tree) for name, tree in trees.items()}
    while True:
        read = _attribute_reads(out)
        changed = False
        for tree in out.values():
            if tree is not None and _prune_members(tree.body, read, False):
                changed = True
        if not changed:
            break
    for tree in out.values():
        if tree is not None:
            place_made_up_passes(tree)
    return out


def run(search: Search) -> None:
    """The script without what nothing reads any more, bold variant first: once a cut has taken the loop
    around the compiled call, what fed it is unread."""
    facts = search.facts
    if search.trees.get(facts.script) is None:
        return
    members = without_unread_members(search.trees)
    variants = [without_unread(members, facts.script, True, facts.compiled_calls)]  # the objects' too, first
    variants += [without_unread(search.trees, facts.script, drop, facts.compiled_calls) for drop in (True, False)]
    seen = {_dump(search.trees)}
    for trees in variants:
        if _dump(trees) not in seen:
            seen.add(_dump(trees))
            if search.ask(trees):
                return


def _dump(trees: Mapping[str, ast.Module | None]) -> str:
    return "\0".join(ast.dump(tree) if tree is not None else "-" for tree in trees.values())
