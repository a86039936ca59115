"""Stand-in values written as the kind they stand for: `block(0, offset)` -> `block(x, offset)`.

pysource-minimize tries `0` in place of every expression it cannot delete, and keeps it when the
break survives: an argument that was the activations reads `0`, a returned pair `(0, chosen)`. Its
`0` is a new node with no place in the original (every node a casekit pass writes has one), so it is
found exactly, and the original node it replaced is the one at the same field of the parent, which
kept its place. Each stand-in is then tried as, in turn: the original expression when it is a plain
name (`x`, `self.scale`) the candidate still binds; a small value of the kind the original
expression had (`torch.randn(1)` for a tensor, `0.0`, `False`, `''`, `None`); the `0` stays only
when the oracle refuses both, or when the original was an integer (then `0` is of its kind).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from casekit.reduce.passes.base import Search, Trees, copy_tree

TENSOR, INT, FLOAT, BOOL, STR, NONE, UNKNOWN = "tensor", "int", "float", "bool", "str", "None", "unknown"
TYPE = "type"  # an annotation: the original's is written back
TORCH_MODULES = frozenset({"torch", "F", "nn", "functional"})
INT_CALLS = frozenset({"len", "int", "round", "sum", "max", "min", "numel", "dim", "size", "item"})
TENSOR_METHODS = frozenset(
    {
        "float",
        "half",
        "to",
        "view",
        "reshape",
        "transpose",
        "permute",
        "contiguous",
        "clone",
        "detach",
        "sum",
        "mean",
        "softmax",
        "masked_fill",
        "unsqueeze",
        "squeeze",
        "flatten",
        "expand",
        "type_as",
        "matmul",
        "pow",
        "sqrt",
        "exp",
        "abs",
        "norm",
        "cumsum",
        "argmax",
        "nonzero",
        "chunk",
        "split",
        "new_zeros",
        "new_ones",
        "tril",
        "triu",
        "cos",
        "sin",
    }
)


ANNOTATIONS = frozenset({"annotation", "returns"})  # the fields where an expression is a type


@dataclass(frozen=True)
class StandIn:
    """A `0` the library left: where it is (file, parent's key, field, index) and the kind it stands for."""

    file: str
    parent: tuple[str, int, int]  # the parent's type, line and column (copies keep them)
    field: str
    index: int | None
    kind: str
    original: ast.expr | None  # the original expression it replaced (None: not found)


def _key(node: ast.AST) -> tuple[str, int, int]:
    return (type(node).__name__, getattr(node, "lineno", -1), getattr(node, "col_offset", -1))


def _stands_in(node: ast.AST, field: str) -> bool:
    """A library `0`, or any integer where a type is written (no annotation is a number, wherever the `0`
    got its place: a pass that moves values gives them one)."""
    in_annotation = field in ANNOTATIONS and isinstance(node, ast.Constant) and type(node.value) is int
    return in_annotation or is_stand_in(node)


def is_stand_in(node: ast.AST) -> bool:
    """The library's `0`: a constant with no place in the original."""
    return (
        isinstance(node, ast.Constant) and node.value == 0 and type(node.value) is int and not hasattr(node, "lineno")
    )


def _children(node: ast.AST) -> Iterator[tuple[str, int | None, ast.AST]]:
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield field, index, item
        elif isinstance(value, ast.AST):
            yield field, None, value


def _annotations(tree: ast.Module) -> dict[str, ast.expr]:
    """Parameter name -> its annotation, over every function (a name a parameter gives a kind)."""
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.setdefault(node.arg, node.annotation)
    return found


def _assigned(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, node.value)
    return found


def kind_of(expr: ast.expr | None, tree: ast.Module, depth: int = 0) -> str:
    """The kind of value the original expression makes, as far as the source says."""
    if expr is None or depth > 3:
        return UNKNOWN
    if isinstance(expr, ast.Constant):
        value = expr.value
        return NONE if value is None else {bool: BOOL, int: INT, float: FLOAT, str: STR}.get(type(value), UNKNOWN)
    if isinstance(expr, ast.Compare | ast.BoolOp) or isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return UNKNOWN if isinstance(expr, ast.Compare) and _tensorish(expr.left, tree, depth) else BOOL
    if isinstance(expr, ast.JoinedStr):
        return STR
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("float",) and isinstance(func, ast.Name):
            return FLOAT
        if name in INT_CALLS and (isinstance(func, ast.Name) or name in ("numel", "dim", "size")):
            return INT
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in TORCH_MODULES:
            return TENSOR
        if isinstance(func, ast.Attribute) and (name in TENSOR_METHODS or _tensorish(func.value, tree, depth)):
            return INT if name in ("item", "tolist") else TENSOR  # a tensor's method makes a tensor
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return TENSOR  # a submodule's call: `self.norm(x)`
        return UNKNOWN
    if isinstance(expr, ast.BinOp):
        left, right = kind_of(expr.left, tree, depth + 1), kind_of(expr.right, tree, depth + 1)
        if TENSOR in (left, right) or isinstance(expr.op, ast.MatMult):
            return TENSOR
        if FLOAT in (left, right) or isinstance(expr.op, ast.Div):
            return FLOAT if UNKNOWN not in (left, right) else UNKNOWN
        return INT if left == right == INT else UNKNOWN
    if isinstance(expr, ast.Subscript):
        return TENSOR if _tensorish(expr.value, tree, depth) else UNKNOWN
    if isinstance(expr, ast.Name):
        annotation = _annotations(tree).get(expr.id)
        if annotation is not None:
            text = ast.unparse(annotation)
            if "Tensor" in text and "|" not in text:
                return TENSOR
            return {"int": INT, "float": FLOAT, "bool": BOOL, "str": STR}.get(text, UNKNOWN)
        assigned = _assigned(tree).get(expr.id)
        return kind_of(assigned, tree, depth + 1) if assigned is not None else UNKNOWN
    return UNKNOWN


def _tensorish(expr: ast.expr, tree: ast.Module, depth: int) -> bool:
    return kind_of(expr, tree, depth + 1) == TENSOR


def stand_ins(trees: Trees, originals: dict[str, ast.Module]) -> list[StandIn]:
    """Every library `0` in the trees, with the original expression it replaced and that one's kind."""
    found = []
    for file, tree in trees.items():
        original = originals.get(file)
        if tree is None or original is None:
            continue
        places = {_key(n): n for n in ast.walk(original) if hasattr(n, "lineno")}
        places[_key(original)] = original
        for parent in ast.walk(tree):
            for field, index, child in _children(parent):
                if not _stands_in(child, field):
                    continue
                counterpart = places.get(_key(parent)) if hasattr(parent, "lineno") or parent is tree else None
                stood = _at(counterpart, field, index, parent) if counterpart is not None else None
                kind = TYPE if field in ANNOTATIONS else kind_of(stood, original)
                found.append(StandIn(file, _key(parent), field, index, kind, stood))
    return found


def _at(node: ast.AST, field: str, index: int | None, mine: ast.AST) -> ast.expr | None:
    value = getattr(node, field, None)
    if index is None:
        return value if isinstance(value, ast.expr) else None
    if not isinstance(value, list) or len(value) != len(getattr(mine, field, ())):
        return None  # items were taken out: the same index is not the same item
    item = value[index]
    return item if isinstance(item, ast.expr) else None


def _small(kind: str) -> list[ast.expr]:
    if kind == TENSOR:
        return [ast.parse(text, mode="eval").body for text in ("torch.randn(1)", "torch.ones(1)")]
    literal: dict[str, float | bool | str | None] = {FLOAT: 0.0, BOOL: False, STR: "", NONE: None}
    return [ast.Constant(value=literal[kind])] if kind in literal else []


def _plain_name(expr: ast.expr | None) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def replaced(trees: Trees, stand_in: StandIn, value: ast.expr) -> Trees | None:
    """A copy of the trees with the stand-in written as `value` (None: it is no longer there)."""
    tree = trees.get(stand_in.file)
    if tree is None:
        return None
    new = copy_tree(tree)
    for parent in ast.walk(new):
        if _key(parent) != stand_in.parent and not (parent is new and stand_in.parent == _key(tree)):
            continue
        current = getattr(parent, stand_in.field, None)
        item = current[stand_in.index] if isinstance(current, list) and stand_in.index is not None else current
        if item is None or not _stands_in(item, stand_in.field):
            continue
        written = copy_tree(value)
        for node in ast.walk(written):
            if isinstance(node, ast.expr):  # a place in the original: the parent's, so it is not found again
                ast.copy_location(node, parent)
        if isinstance(current, list) and stand_in.index is not None:
            current[stand_in.index] = written
        else:
            setattr(parent, stand_in.field, written)
        return {**trees, stand_in.file: new}
    return None


def bare_values(tree: ast.Module) -> list[ast.Expr]:
    """The statements that are a value alone and do nothing: a library `0`, or any constant a pass left
    as a statement (`0` where `batch, seq, dim = x.shape` was); a docstring and a `...` body stay."""
    found = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            for position, statement in enumerate(body if isinstance(body, list) else ()):
                if _bare(statement, docstring=position == 0 and field == "body" and isinstance(node, DEFINED)):
                    found.append(statement)
    return found


DEFINED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _bare(statement: ast.AST, docstring: bool) -> bool:
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
        return False
    value = statement.value.value
    return is_stand_in(statement.value) or not (value is Ellipsis or (docstring and isinstance(value, str)))


def without_bare_stand_ins(trees: Trees) -> Trees | None:
    """A copy of the trees without the statements that are a value alone (None: there is none)."""
    out = dict(trees)
    changed = False
    for file, tree in trees.items():
        if tree is None:
            continue
        new = copy_tree(tree)
        bare = {id(statement) for statement in bare_values(new)}
        for node in ast.walk(new):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(node, field, None)
                if isinstance(body, list) and any(id(s) in bare for s in body):
                    body[:] = [s for s in body if id(s) not in bare]
                    if not body and field == "body" and not isinstance(node, ast.Module):
                        body.append(ast.Pass(lineno=0, col_offset=0, end_lineno=0, end_col_offset=0))
                    changed = True
        out[file] = new
    return out if changed else None


def run(search: Search) -> None:
    bare = without_bare_stand_ins(search.trees)
    if bare is not None:
        search.ask(bare)  # a value alone does nothing: a statement the library or a pass emptied
    originals = {name: ast.parse(text) for name, text in search.facts.originals.items()}
    for stand_in in stand_ins(search.trees, originals):
        if stand_in.kind == INT:
            continue  # `0` is of its kind
        written_back = _plain_name(stand_in.original) or stand_in.field in ANNOTATIONS  # a type: as written
        tries = [stand_in.original] if written_back and stand_in.original is not None else []
        for value in [*tries, *_small(stand_in.kind)]:
            candidate = replaced(search.trees, stand_in, value)
            if candidate is not None and search.ask(candidate):
                break
