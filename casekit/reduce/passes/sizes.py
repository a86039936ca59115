"""Shrinking the data, not the code: tensor shapes, loop counts and sizes, while the oracle holds.

The integers that size things are found by where they stand: the arguments of
a tensor factory (`torch.randn(4, 16, 32)`, `size=`), of `range(...)`, a
call's integer keywords (`Config(hidden=64, layers=4)`) and the integer
fields of a module or class body (a config dataclass's defaults). Each is
tried at 1, else halved while kept. dtype, device and `requires_grad` are not
integers and are never touched (the oracle also refuses a candidate whose
inputs changed them). Loop counts go first, alone (every later candidate runs
faster: one layer, one step); shapes and sizes once the code is small.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from casekit.reduce.passes.base import Search, copy_tree

TENSOR_FACTORIES = frozenset(
    {"randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "randperm", "eye", "normal", "linspace"}
)
SIZE_KEYWORDS = frozenset({"size", "shape"})
NOT_SIZES = frozenset({"dim", "dims", "axis", "start_dim", "end_dim", "seed", "padding_idx", "ignore_index", "index"})


@dataclass(frozen=True)
class Literal:
    """One sizing integer: its file, its position in the file's walk order, and what it sizes."""

    file: str
    position: int
    kind: str  # "shape" | "loop" | "size"
    line: int  # its original line (for the progress log)


def _is_size(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 2


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _sizes_in(node: ast.AST) -> Iterator[ast.AST]:
    if _is_size(node):
        yield node
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            if _is_size(element):
                yield element


def _literal_nodes(tree: ast.Module, kinds: frozenset[str]) -> dict[int, str]:
    """id(node) -> kind, for every sizing integer of the tree."""
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in TENSOR_FACTORIES and "shape" in kinds:
                for argument in node.args:
                    found.update((id(n), "shape") for n in _sizes_in(argument))
                for keyword in node.keywords:
                    if keyword.arg in SIZE_KEYWORDS:
                        found.update((id(n), "shape") for n in _sizes_in(keyword.value))
            elif name == "range" and "loop" in kinds:
                found.update((id(a), "loop") for a in node.args if _is_size(a))
            if "size" in kinds:
                for keyword in node.keywords:
                    if keyword.arg and keyword.arg not in NOT_SIZES and keyword.arg not in SIZE_KEYWORDS:
                        if _is_size(keyword.value):
                            found.setdefault(id(keyword.value), "size")
        elif isinstance(node, ast.Module | ast.ClassDef) and "size" in kinds:
            for statement in node.body:
                value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
                if value is not None and _is_size(value):
                    found.setdefault(id(value), "size")
    return found


def sizing_literals(trees: Mapping[str, ast.Module | None], kinds: frozenset[str]) -> list[Literal]:
    """The sizing integers of every file, in reading order."""
    literals = []
    for name, tree in trees.items():
        if tree is None:
            continue
        wanted = _literal_nodes(tree, kinds)
        for position, node in enumerate(ast.walk(tree)):
            if id(node) in wanted:
                literals.append(Literal(name, position, wanted[id(node)], getattr(node, "lineno", 0)))
    return sorted(literals, key=lambda lit: (lit.file, lit.line, lit.position))


def value_of(trees: Mapping[str, ast.Module | None], literal: Literal) -> int:
    tree = trees[literal.file]
    assert tree is not None
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == literal.position)
    assert isinstance(node, ast.Constant) and isinstance(node.value, int)
    return node.value


def with_values(
    trees: Mapping[str, ast.Module | None], changes: Sequence[tuple[Literal, int]]
) -> dict[str, ast.Module | None]:
    """A copy of the trees with some literals set (line numbers kept: only values change)."""
    out = dict(trees)
    for name in {literal.file for literal, _ in changes}:
        tree = copy_tree(trees[name])
        nodes = list(ast.walk(tree)) if tree is not None else []
        for literal, value in changes:
            if literal.file == name:
                node = nodes[literal.position]
                assert isinstance(node, ast.Constant)
                node.value = value
        out[name] = tree
    return out


def shrink(search: Search, kinds: frozenset[str]) -> None:
    """Each sizing integer of the best so far in turn: 1, else halves while the oracle keeps them."""
    for literal in sizing_literals(search.trees, kinds):
        now = value_of(search.trees, literal)
        if search.ask(with_values(search.trees, [(literal, 1)])):
            continue
        target = now // 2
        while target >= 2 and search.ask(with_values(search.trees, [(literal, target)])):
            target //= 2


def loops(search: Search) -> None:
    shrink(search, frozenset({"loop"}))


def every_size(search: Search) -> None:
    shrink(search, frozenset({"shape", "loop", "size"}))
