"""What follows the break in each frame of its call path (casekit/reduce/after_break.py): a pure
function over trees; a real reduction that takes this cut is tests/test_reduce.py's."""

from __future__ import annotations

import ast
import textwrap

from casekit.reduce.passes.after_break import completed_path, without_what_follows
from casekit.reduce.passes.unread import without_unread

MODEL = textwrap.dedent(
    """
    import torch

    class Block(torch.nn.Module):
        def forward(self, x):
            h = x * 2
            n = h.sum().item()
            y = h + n
            return y.relu()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.head = torch.nn.Linear(3, 3)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
                x = x * 0.5
            return self.head(x)

    def report(loss):
        print(loss)

    def main():
        model = torch.compile(Model())
        data = [torch.randn(3) for _ in range(4)]
        for step, batch in enumerate(data):
            out = model(torch.randn(3))
            loss = out.sum()
            report(loss)
        print("done")

    main()
    """
).lstrip()
PATH = [("m.py", 18), ("m.py", 6)]  # Model.forward's call of the block, the .item() in Block.forward
DRIVER = [("m.py", 29)]  # where main calls the compiled model


def cut(text: str, unroll: bool = False, path: list[tuple[str, int]] = PATH) -> str:
    trees = without_what_follows({"m.py": ast.parse(text)}, path, DRIVER, unroll)
    tree = trees["m.py"]
    assert tree is not None
    return ast.unparse(tree)


def test_each_frame_on_the_path_ends_with_its_path_statement() -> None:
    text = cut(MODEL)
    block = text.split("class Model")[0]
    main = text.split("def main():")[1]
    assert "\n        h.sum().item()" in block and "y = h + n" not in block and "relu" not in block
    # the loop keeps its header and the path line; what followed it in the body and after it goes
    assert "for block in self.blocks:\n            block(x)\n\ndef" in text and "x * 0.5" not in text
    assert "self.head(x)" not in text and "self.head = " in text  # __init__ is not on the path
    # nothing on the path returns a value now: each path statement keeps its call, not the result
    assert "    model(torch.randn(3))" in main and "out =" not in main and "loss" not in main and "done" not in main
    assert "block(x)" in text and "x = block(x)" not in text
    assert "data = [" in main and "for step, batch in enumerate(data)" in main
    assert "def report(loss)" in text  # a definition is not a statement after the path: unread.py's


def test_the_bold_variant_runs_the_loop_around_the_compiled_call_once_and_unread_takes_its_feed() -> None:
    trees = without_what_follows({"m.py": ast.parse(MODEL)}, PATH, DRIVER, unroll_drivers=True)
    text = ast.unparse(trees["m.py"])  # type: ignore[arg-type]
    # once: the loop's target bound to its first item, then its body
    assert (
        "for step, batch" not in text
        and "\n    step, batch = next(iter(enumerate(data)))\n    model(torch.randn(3))" in text
    )
    assert "for block in self.blocks:" in text  # only loops around the driver's call run once
    lean = ast.unparse(without_unread(trees, "m.py", True, frozenset({(29, 14)}))["m.py"])  # type: ignore[arg-type]
    assert "data" not in lean and "def report" not in lean
    assert "model(torch.randn(3))" in lean and "h.sum().item()" in lean


def test_a_loop_keeps_the_tail_that_ends_it() -> None:
    text = textwrap.dedent(
        """
        def main(model, x):
            while True:
                out = model(x)
                if out is not None:
                    break
            for item in range(3):
                y = model(x)
                if y.sum() > 0:
                    break
                print(item)
            print("after")
        """
    ).lstrip()
    out = cut(text, path=[("m.py", 3), ("m.py", 7)])
    # cutting `if out is not None: break` would leave `while True` with no way out
    assert "break" in out.split("for item")[0] and "if y.sum() > 0:\n            break" in out
    assert "print('after')" not in out


def test_lines_outside_any_function_body_or_in_a_class_body_cut_nothing_above_them() -> None:
    text = textwrap.dedent(
        """
        import torch

        class Config:
            dim = torch.zeros(1).shape[0]
            depth = 2

        out = torch.compile(torch.nn.Identity())(torch.randn(2))
        print(out)
        """
    ).lstrip()
    out = cut(text, path=[("m.py", 4), ("m.py", 7)])
    assert "depth = 2" in out  # a class body is no frame: nothing cut in it
    assert "print(out)" not in out and "\ntorch.compile" in out  # the module is the driver's frame


def test_a_file_not_on_the_path_is_left_as_it_is_and_the_input_trees_are_not_changed() -> None:
    tree = ast.parse(MODEL)
    before = ast.dump(tree)
    trees = without_what_follows({"m.py": tree, "other.py": ast.parse("x = 1\ny = 2\n")}, PATH, DRIVER)
    assert ast.dump(tree) == before
    assert ast.unparse(trees["other.py"]) == "x = 1\ny = 2"  # type: ignore[arg-type]


def test_the_callers_the_eager_run_saw_complete_a_path_dynamo_started_below_them() -> None:
    tree = ast.parse(MODEL)
    # Dynamo resumed inside Block.forward: its stack names the driver and the .item() only
    callers = {("m.py", 4): {("m.py", 18)}, ("m.py", 16): {("m.py", 29)}, ("m.py", 25): {("m.py", 34)}}
    path = completed_path({"m.py": tree}, [("m.py", 29), ("m.py", 6)], callers)
    assert path == [("m.py", 29), ("m.py", 6), ("m.py", 18), ("m.py", 34)]
    text = ast.unparse(without_what_follows({"m.py": tree}, path, DRIVER)["m.py"])  # type: ignore[arg-type]
    assert "for block in self.blocks:\n            block(x)\n\ndef" in text  # the caller keeps no result
    assert completed_path({"m.py": tree}, [("m.py", 6)], {}) == [("m.py", 6)]  # nothing seen: as it was
