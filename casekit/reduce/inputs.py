"""Shrinking the data, not the code: tensor shapes, loop counts and sizes, while the oracle holds.

The integers that size things are found by where they stand: the arguments of
a tensor factory (`torch.randn(4, 16, 32)`, `size=`), of `range(...)`, a
call's integer keywords (`Config(hidden=64, layers=4)`) and the integer
fields of a module or class body (a config dataclass's defaults). Each is
tried at 1, then halved while kept. dtype, device and `requires_grad` are not
integers and are never touched (the oracle also refuses a candidate whose
inputs changed them). Several literals are tried side by side, each on its own
from the best so far; those kept together are then tried combined.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from casekit.reduce.candidate import Candidate, render_candidate
from casekit.reduce.lines import OriginalIndex, RenderError

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
        tree = copy.deepcopy(trees[name])
        nodes = list(ast.walk(tree)) if tree is not None else []
        for literal, value in changes:
            if literal.file == name:
                node = nodes[literal.position]
                assert isinstance(node, ast.Constant)
                node.value = value
        out[name] = tree
    return out


@dataclass
class ShrinkStats:
    tried: int = 0
    kept: int = 0


def shrink_inputs(
    best: Candidate,
    indexes: Mapping[str, OriginalIndex],
    judge: Callable[[Sequence[Candidate]], list[bool]],
    jobs: int,
    kinds: frozenset[str] = frozenset({"shape", "loop", "size"}),
    on_kept: Callable[[Candidate], None] = lambda candidate: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[Candidate, ShrinkStats]:
    """Shrink every sizing integer of `best` as far as the oracle keeps it; the best candidate found."""
    stats = ShrinkStats()
    queue: list[tuple[Literal, int]] = [(lit, 1) for lit in sizing_literals(best.trees, kinds)]

    def build(changes: Sequence[tuple[Literal, int]]) -> Candidate | None:
        try:
            return render_candidate(with_values(best.trees, changes), indexes)
        except (RenderError, SyntaxError, ValueError):
            return None

    while queue and not should_stop():
        batch, queue = queue[:jobs], queue[jobs:]
        built = [(change, build([change])) for change in batch]
        runnable = [(change, candidate) for change, candidate in built if candidate is not None]
        answers = judge([candidate for _, candidate in runnable]) if runnable else []
        stats.tried += len(runnable)
        kept = [(change, candidate) for (change, candidate), answer in zip(runnable, answers, strict=True) if answer]
        refused = [change for (change, _), answer in zip(runnable, answers, strict=True) if not answer]
        accepted: list[tuple[Literal, int]] = []
        if len(kept) > 1:
            combined = build([change for change, _ in kept])
            stats.tried += 1
            if combined is not None and judge([combined])[0]:
                best, accepted = combined, [change for change, _ in kept]
            else:
                (first, candidate), others = kept[0], kept[1:]
                best, accepted = candidate, [first]
                queue = [change for change, _ in others] + queue  # tried again from the new best
        elif kept:
            (change, candidate) = kept[0]
            best, accepted = candidate, [change]
        if accepted:
            stats.kept += len(accepted)
            on_kept(best)
        for literal, value in accepted:
            if value > 1 and value // 2 >= 2:  # 1 was refused before: halve again
                queue.append((literal, value // 2))
        for literal, value in refused:
            now = value_of(best.trees, literal)
            if value == 1 and now >= 4:  # not down to 1: try half way
                queue.append((literal, now // 2))
    return best, stats
