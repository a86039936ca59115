"""Made-up inputs for the compiled call (casekit/reduce/arguments.py): the probe's call records read,
literals written for what they describe, the call found at its recorded columns; then what only made
those inputs left out (casekit/reduce/unread.py).

Pure functions over trees and the probe's JSON; the probe recording real call sites and a reduction
that drops a data pipeline through this pass are tests/test_reduce.py's."""

from __future__ import annotations

import ast
import textwrap

from casekit.reduce.facts import recorded_calls
from casekit.reduce.passes.made_up_inputs import literal_for, with_made_up_inputs
from casekit.reduce.passes.unread import without_unread

SCRIPT = textwrap.dedent(
    """
    import torch

    def batches(texts):
        for text in texts:
            yield torch.tensor([[len(w) for w in text.split()]])

    model = torch.compile(torch.nn.Embedding(10, 4))
    for ids in batches(["a bb ccc"]):
        out = model(ids, scale=2.0)
    """
).lstrip()


def call_at(text: str, line: int, **extra: object) -> dict[str, object]:
    """The probe's record of a call: the call expression on `line` (its columns as Python 3.11 gives)."""
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call) and n.lineno == line)
    site = {
        "file": "repro.py",
        "line": node.lineno,
        "end_line": node.end_lineno,
        "col": node.col_offset,
        "end_col": node.end_col_offset,
    }
    return {
        "site": site,
        "args": [{"kind": "tensor", "shape": [1, 3], "dtype": "int64", "device": "cpu", "requires_grad": False}],
        "kwargs": {"scale": {"kind": "float", "value": 2.0}},
        **extra,
    }


def raw(*calls: dict[str, object]) -> dict[str, object]:
    return {"runs": {"compiled": {"calls": list(calls)}}}


def test_the_call_is_found_at_its_columns_and_its_arguments_written_as_literals() -> None:
    calls = recorded_calls(raw(call_at(SCRIPT, 9)))
    assert [(c.file, c.line) for c in calls] == [("repro.py", 9)]
    (made,) = list(with_made_up_inputs({"repro.py": ast.parse(SCRIPT)}, calls, variant=0))
    text = ast.unparse(made["repro.py"])
    assert "model(torch.ones((1, 3), dtype=torch.int64), scale=2.0)" in text
    # the literal stands where the argument stood: the line map keeps it on the call's line
    call = next(n for n in ast.walk(made["repro.py"]) if isinstance(n, ast.Call) and n.lineno == 9)
    assert all(getattr(n, "lineno", 9) == 9 for n in ast.walk(call))


def test_the_second_variant_writes_other_values() -> None:
    calls = recorded_calls(raw(call_at(SCRIPT, 9)))
    (made,) = list(with_made_up_inputs({"repro.py": ast.parse(SCRIPT)}, calls, variant=1))
    assert "model(torch.zeros((1, 3), dtype=torch.int64), scale=2.0)" in ast.unparse(made["repro.py"])


def test_a_call_whose_arguments_are_already_literals_gives_no_candidate() -> None:
    text = SCRIPT.replace("model(ids, scale=2.0)", "model(torch.ones((1, 3), dtype=torch.int64), scale=2.0)")
    calls = recorded_calls(raw(call_at(text, 9)))
    assert list(with_made_up_inputs({"repro.py": ast.parse(text)}, calls, variant=0)) == []


def test_without_columns_every_call_on_the_line_with_that_arity_is_a_candidate() -> None:
    text = "import torch\nf = torch.compile(torch.sin)\nprint(f(torch.tensor([1.0]).cos()))\n"
    record = {
        "site": {"file": "repro.py", "line": 3},
        "args": [{"kind": "tensor", "shape": [1], "dtype": "float32", "device": "cpu", "requires_grad": False}],
        "kwargs": {},
    }
    made = [
        ast.unparse(t["repro.py"])
        for t in with_made_up_inputs({"repro.py": ast.parse(text)}, recorded_calls(raw(record)), 0)
    ]
    # outermost first: print(...), then f(...); torch.tensor([1.0]) has one argument too, a literal already
    assert [m.splitlines()[-1] for m in made] == ["print(torch.randn((1,)))", "print(f(torch.randn((1,))))"]


def test_the_sites_called_most_come_first_and_each_site_once() -> None:
    once = call_at(SCRIPT, 5)
    often = call_at(SCRIPT, 9)
    calls = recorded_calls(raw(once, often, often, often))
    assert [c.line for c in calls] == [9, 5]


def test_records_without_a_site_or_with_bad_fields_are_skipped() -> None:
    good = call_at(SCRIPT, 9)
    bad = [
        {"args": [], "kwargs": {}},
        {"site": {"file": 3, "line": 9}, "args": [], "kwargs": {}},
        {"site": {"file": "repro.py", "line": "9"}, "args": [], "kwargs": {}},
        {"site": {"file": "repro.py", "line": 9}, "args": "x", "kwargs": {}},
        "not a record",
    ]
    assert [c.line for c in recorded_calls(raw(*bad, good))] == [9]
    assert recorded_calls({"runs": "x"}) == [] and recorded_calls({}) == []


def written(description: object, variant: int = 0) -> str:
    node = literal_for(description, variant)
    assert node is not None, description
    return ast.unparse(node)


def test_a_literal_makes_a_value_that_fits_the_description() -> None:
    # tensors keep dtype, device and requires_grad (the oracle refuses a candidate that changes them);
    # the tensors these make are run for real by tests/test_reduce.py's reduction
    grad = {"kind": "tensor", "shape": [2, 3], "dtype": "bfloat16", "device": "cpu", "requires_grad": True}
    assert written(grad) == "torch.randn((2, 3), dtype=torch.bfloat16, requires_grad=True)"
    assert written(grad, 1) == "torch.ones((2, 3), dtype=torch.bfloat16, requires_grad=True)"
    mask = {"kind": "tensor", "shape": [4], "dtype": "bool", "device": "cuda:0"}
    assert written(mask, 1) == "torch.zeros((4,), dtype=torch.bool, device='cuda:0')"
    assert written({"kind": "tensor", "shape": [], "dtype": "float32", "device": "cpu"}) == "torch.randn(())"
    nested = {
        "kind": "dict",
        "length": 2,
        "str_keys": True,
        "items": {
            "x": {"kind": "tuple", "length": 2, "items": [{"kind": "int", "value": 3}, {"kind": "NoneType"}]},
            "name": {"kind": "str", "value": "relu", "length": 4},
        },
    }
    assert ast.literal_eval(written(nested)) == {"x": (3, None), "name": "relu"}


def test_what_cannot_be_written_again_is_left_as_it_is() -> None:
    for description in (
        {"kind": "Linear"},  # an object
        {"kind": "list", "length": 40, "items": [{"kind": "int", "value": 1}] * 16},  # truncated by the probe
        {"kind": "str", "value": "x" * 80, "length": 200},
        {"kind": "dict", "length": 1, "str_keys": False, "items": {"1": {"kind": "int", "value": 1}}},
        {"kind": "tensor", "shape": [2], "dtype": "float32; import os", "device": "cpu"},  # not a dtype name
        {"kind": "tensor", "shape": [-1], "dtype": "float32", "device": "cpu"},
        "not a description",
    ):
        assert literal_for(description, 0) is None, description


DRIVER = textwrap.dedent(
    """
    import random
    import torch

    def documents(n, rng):
        return [rng.random() for _ in range(n)]

    class Model(torch.nn.Module):
        def forward(self, x):
            h = x.sum()
            y = h.item()
            return x

    def main():
        rng = random.Random(0)
        docs = documents(4, rng)
        compiled = torch.compile(Model())
        out = compiled(torch.ones((2,)))

    result = main()
    """
).lstrip()


def test_what_only_made_the_inputs_goes_and_unread_calls_elsewhere_stay_as_statements() -> None:
    tree = ast.parse(DRIVER)
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n).startswith("compiled("))
    where = frozenset({(call.lineno, call.col_offset)})
    text = ast.unparse(without_unread({"repro.py": tree}, "repro.py", True, where)["repro.py"])
    # beside the compiled call: the data's values and their makers are gone, the compiled call stays
    for gone in ("random", "documents", "rng", "docs"):
        assert gone not in text, text
    assert "compiled(torch.ones((2,)))" in text and "out =" not in text
    # in forward (where the break may be) an unread value that calls keeps its call as a statement
    assert "h.item()" in text and "y =" not in text
    # the script's entry keeps running
    assert text.rstrip().endswith("main()")
    # the cautious variant keeps every call, beside the compiled call too
    cautious = ast.unparse(without_unread({"repro.py": ast.parse(DRIVER)}, "repro.py", False, where)["repro.py"])
    assert "documents(4, rng)" in cautious and "docs =" not in cautious
