"""Made-up inputs for the compiled call: the data pipeline out in one step.

A real script feeds its compiled model from a tokenizer, a dataset, a batching
loop; the break does not care where the tensor came from, only what it is. The
original's run records, for each call of a compiled entry point, where the call
was made (file, line and, on Python 3.11+, the call expression's columns) and
what went in (a tensor's shape, dtype, device and `requires_grad`; a number, a
string, a list, a dict). One candidate replaces that call's arguments with
literals that make the same values (`torch.randn((4, 16))`, `torch.ones((1, 16),
dtype=torch.int64)`, `3`); the oracle judges it like any other (values can
matter: a mask made from the ids, a data-dependent branch), and a second
variant with other values is tried when the first is refused. Once kept, what
only made the inputs is dead code: the explorer's statement rounds take the loop
around the call, and its unread-bindings try (`unread.py`) what fed it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from casekit.reduce.facts import RecordedCall
from casekit.reduce.passes.base import Search

FLOATS = frozenset({"float16", "bfloat16", "float32", "float64", "complex64", "complex128"})


def _int(value: object) -> bool:
    return type(value) is int


def _torch(attribute: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(id="torch", ctx=ast.Load()), attr=attribute, ctx=ast.Load())


def literal_for(description: Any, variant: int) -> ast.expr | None:
    """An expression that makes a value the description fits, or None when none can be written (an
    object, a truncated list or string). Variant 0: random floats, integer and bool tensors of ones;
    variant 1: floats of ones, integers and bools of zeros."""
    if not isinstance(description, Mapping):
        return None
    kind = description.get("kind")
    if kind == "tensor":
        return _tensor_literal(description, variant)
    if kind in ("int", "float", "bool") and "value" in description or kind == "NoneType":
        value = description.get("value")
        return ast.Constant(value=value) if isinstance(value, bool | int | float) or value is None else None
    if kind == "str":
        value = description.get("value")
        if not isinstance(value, str) or description.get("length", len(value)) != len(value):
            return None
        return ast.Constant(value=value)
    if kind in ("list", "tuple"):
        items = description.get("items")
        if not isinstance(items, list) or description.get("length") != len(items):
            return None
        elements = [literal_for(item, variant) for item in items]
        if any(e is None for e in elements):
            return None
        made = [e for e in elements if e is not None]
        return ast.List(elts=made, ctx=ast.Load()) if kind == "list" else ast.Tuple(elts=made, ctx=ast.Load())
    if kind == "dict":
        items = description.get("items")
        if not isinstance(items, Mapping) or description.get("length") != len(items) or not description.get("str_keys"):
            return None
        values = [literal_for(value, variant) for value in items.values()]
        if any(v is None for v in values):
            return None
        return ast.Dict(keys=[ast.Constant(value=k) for k in items], values=[v for v in values if v is not None])
    return None


def _tensor_literal(description: Mapping[str, Any], variant: int) -> ast.expr | None:
    dtype, shape, device = description.get("dtype"), description.get("shape"), description.get("device")
    if not isinstance(dtype, str) or not dtype.isidentifier() or not isinstance(shape, list):
        return None
    if not all(_int(d) and d >= 0 for d in shape) or not isinstance(device, str):
        return None
    floating = dtype in FLOATS
    factory = ("randn" if variant == 0 else "ones") if floating else ("ones" if variant == 0 else "zeros")
    keywords = []
    if dtype != "float32":
        keywords.append(ast.keyword(arg="dtype", value=_torch(dtype)))
    if device != "cpu":
        keywords.append(ast.keyword(arg="device", value=ast.Constant(value=device)))
    if description.get("requires_grad"):
        keywords.append(ast.keyword(arg="requires_grad", value=ast.Constant(value=True)))
    size = ast.Tuple(elts=[ast.Constant(value=d) for d in shape], ctx=ast.Load())
    return ast.Call(func=_torch(factory), args=[size], keywords=keywords)


def _is_made_up(node: ast.expr) -> bool:
    """Already a literal, or a torch factory of literals: nothing to gain by writing it again."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple | ast.List):
        return all(_is_made_up(e) for e in node.elts)
    if isinstance(node, ast.Attribute):  # torch.int64, torch.ones
        return isinstance(node.value, ast.Name) and node.value.id == "torch"
    if isinstance(node, ast.Call):
        parts = [node.func, *node.args, *(k.value for k in node.keywords)]
        return all(_is_made_up(part) for part in parts)
    return False


def _calls_at(tree: ast.Module, call: RecordedCall) -> list[ast.Call]:
    """The call expressions that can be the recorded call: at its exact columns when known, else those
    on its line with the arguments it was given (outermost first)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if call.col is not None and call.end_line is not None and call.end_col is not None:
            if (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == (
                call.line,
                call.end_line,
                call.col,
                call.end_col,
            ):
                found.append(node)
        elif node.lineno <= call.line <= (node.end_lineno or node.lineno):
            found.append(node)
    names = sorted(k for k, _ in call.kwargs)
    return [
        node
        for node in found
        if len(node.args) == len(call.args)
        and not any(isinstance(a, ast.Starred) for a in node.args)
        and sorted(k.arg for k in node.keywords if k.arg is not None) == names
        and all(k.arg is not None for k in node.keywords)
    ]


def _replace(node: ast.Call, call: RecordedCall, variant: int) -> bool:
    """Write the recorded arguments into `node` in place; True when at least one changed."""
    changed = False
    given = dict(call.kwargs)
    slots: list[tuple[ast.expr, Any, Any]] = []
    for index, argument in enumerate(node.args):
        slots.append((argument, call.args[index], ("arg", index)))
    for keyword in node.keywords:
        slots.append((keyword.value, given[str(keyword.arg)], ("kw", keyword)))
    for old, description, (kind, where) in slots:
        if _is_made_up(old):
            continue
        new = literal_for(description, variant)
        if new is None:
            continue
        for made in ast.walk(new):  # the original's place: the line map keeps the literal on its line
            if isinstance(made, ast.expr | ast.keyword):
                ast.copy_location(made, old)
        if kind == "arg":
            assert isinstance(where, int)
            node.args[where] = new
        else:
            assert isinstance(where, ast.keyword)
            where.value = new
        changed = True
    return changed


def with_made_up_inputs(
    trees: Mapping[str, ast.Module | None], calls: Sequence[RecordedCall], variant: int
) -> Iterator[dict[str, ast.Module | None]]:
    """For each recorded call that can be found in the trees: a copy with its arguments made up."""
    for call in calls:
        tree = trees.get(call.file)
        if tree is None:
            continue
        for position in range(len(_calls_at(tree, call))):
            copied = copy.deepcopy(tree)
            node = _calls_at(copied, call)[position]
            if _replace(node, call, variant):
                yield {**trees, call.file: copied}


def run(search: Search) -> None:
    """Each recorded call site in turn: its arguments as literals, random values first, then ones and
    zeros (values can matter: a mask made from the ids); the first kept wins."""
    for call in search.facts.calls:
        tried = [trees for variant in (0, 1) for trees in with_made_up_inputs(search.trees, [call], variant)]
        for trees in tried:
            if search.ask(trees):
                break
