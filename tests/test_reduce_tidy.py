"""The tidy stage and the coarse cuts added with it, as pure functions over trees (each one judged by
the oracle in a reduction: tests/test_reduce_pipeline.py drives them with a fake oracle, tests/test_reduce.py
with real torch).

The controls show each rule biting: without it, what the test forbids is there."""

from __future__ import annotations

import ast
import textwrap

import pytest

from casekit.reduce.facts import Facts
from casekit.reduce.passes import compile_call, docstrings, loops, parameters, results, stand_ins
from casekit.reduce.passes.unread import without_unread_members
from casekit.reduce.source.candidate import render
from casekit.reduce.source.comments import read_comments
from casekit.reduce.source.lines import OriginalIndex, count_code_lines


class Asked:
    """A Search that keeps what a rule says and records each question (no oracle run)."""

    def __init__(self, text: str, keep=lambda text: True) -> None:  # type: ignore[no-untyped-def]
        self.facts = Facts(script="m.py", originals={"m.py": text}, order=("m.py",))
        self.trees: dict[str, ast.Module | None] = {"m.py": ast.parse(text)}
        self.keep = keep
        self.asked: list[str] = []

    def ask(self, trees):  # type: ignore[no-untyped-def]
        text = ast.unparse(trees["m.py"])
        self.asked.append(text)
        if self.keep(text):
            self.trees = dict(trees)
            return True
        return False

    def say(self, phase: str) -> None:
        pass

    def finishing(self, on: bool) -> None:
        pass

    @property
    def text(self) -> str:
        return ast.unparse(self.trees["m.py"])  # type: ignore[arg-type]


MODEL = textwrap.dedent(
    """
    import torch

    class Router(torch.nn.Module):
        def __init__(self, cfg, dim, *, scale=2):
            super().__init__()
            self.proj = torch.nn.Linear(dim, 4)

        def forward(self, tokens, offset):
            return self.proj(tokens).sum().item()

    def route(router, tokens, offset, unused=None):
        return router(tokens, offset)

    r = Router(None, 8, scale=3)
    print(route(r, torch.randn(2, 8), 1, unused=5))
    """
)


def test_unused_parameters_go_with_the_arguments_passed_for_them() -> None:
    found = {(u.name, u.parameter) for u in parameters.unused_parameters({"m.py": ast.parse(MODEL)})}
    assert found == {("__init__", "cfg"), ("__init__", "scale"), ("forward", "offset"), ("route", "unused")}
    search = Asked(MODEL)
    parameters.run(search)  # type: ignore[arg-type]
    text = search.text
    assert "def __init__(self, dim):" in text and "Router(8)" in text  # the class's call, by name
    assert "def route(router, tokens, offset):" in text and "route(r, torch.randn(2, 8), 1))" in text  # keyword too
    assert "def forward(self, tokens):" in text
    assert len(search.asked) == 1  # all at once, kept


def test_a_refused_removal_is_tried_function_by_function() -> None:
    search = Asked(MODEL, keep=lambda text: "def route(router, tokens, offset, unused=None)" in text)
    parameters.run(search)  # type: ignore[arg-type]
    assert "def __init__(self, dim):" in search.text and "def route(router, tokens, offset, unused=None)" in search.text
    assert "route(r, torch.randn(2, 8), 1, unused=5)" in search.text
    assert len(search.asked) > 2


def test_a_forward_called_through_an_instance_loses_its_argument_at_the_recorded_caller() -> None:
    tree = ast.parse(MODEL)
    forward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward")
    caller_line = next(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return) and "router(" in ast.unparse(n))
    search = Asked(MODEL)
    search.facts = Facts(
        "m.py", {"m.py": MODEL}, ("m.py",), callers={("m.py", forward.lineno): frozenset({("m.py", caller_line)})}
    )
    parameters.run(search)  # type: ignore[arg-type]
    assert "return router(tokens)" in search.text
    control = Asked(MODEL)  # without the recorded caller, the instance's call cannot be found by name
    parameters.run(control)  # type: ignore[arg-type]
    assert "return router(tokens, offset)" in control.text


COMPILED_STEP = textwrap.dedent(
    """
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, config):
            super().__init__()

    class Classifier(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.encoder = Encoder(config)

    def train_step(model, tokens, recorded):
        return model(tokens).sum().item()

    def train():
        step_fn = torch.compile(train_step)
        step_fn(Classifier(0), torch.ones(2), [])
        torch.compile(train_step)(Classifier(0), torch.ones(2), [])
    """
)


def test_a_compiled_function_loses_its_argument_and_what_a_removal_frees_goes_next() -> None:
    tree = ast.parse(COMPILED_STEP)
    step = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "train_step")
    calls = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and "Classifier(0)" in ast.unparse(n)}
    search = Asked(COMPILED_STEP)
    search.facts = Facts(
        "m.py",
        {"m.py": COMPILED_STEP},
        ("m.py",),
        callers={("m.py", step.lineno): frozenset(("m.py", c) for c in calls)},
    )
    parameters.run(search)  # type: ignore[arg-type]
    text = search.text
    assert "def train_step(model, tokens):" in text
    assert (
        "step_fn(Classifier(), torch.ones(2))" in text
        and "torch.compile(train_step)(Classifier(), torch.ones(2))" in text
    )
    # Encoder(config) went in the first round, which left Classifier's config unused: the next round takes it
    assert "def __init__(self, config)" not in text and "Encoder()" in text
    assert parameters.unused_parameters(search.trees) == []
    # the control: without the recorded callers the compiled calls are not found, the calls still pass three
    # arguments to two parameters (a TypeError: the oracle refuses it), and the parameter stays
    control = Asked(COMPILED_STEP, keep=lambda text: not ("def train_step(model, tokens):" in text and ", [])" in text))
    parameters.run(control)  # type: ignore[arg-type]
    assert "def train_step(model, tokens, recorded):" in control.text and "Encoder()" in control.text


LOOPY = textwrap.dedent(
    """
    def main(blocks, data):
        for block in blocks:
            x = block(1)
        for step, (x, y) in enumerate(data):
            if step > 2:
                break
            print(x)
    """
)


def test_loops_run_once_with_their_target_bound_to_the_first_item() -> None:
    search = Asked(LOOPY)
    loops.run(search)  # type: ignore[arg-type]
    assert "block = next(iter(blocks))\n    x = block(1)" in search.text
    assert "for step, (x, y) in enumerate(data)" in search.text  # it can leave itself: left to later passes
    refused = Asked(LOOPY, keep=lambda text: "for block in blocks" in text)
    loops.run(refused)  # type: ignore[arg-type]
    assert "for block in blocks" in refused.text


STAND_INS = textwrap.dedent(
    """
    import torch

    def block(x: torch.Tensor, offset: int, scale: float, name: str):
        return x + offset

    def run(x: torch.Tensor):
        h = x.relu()
        return (block(h, 2, 0.5, "b"), h.sum())
    """
)


def _with_library_zeros(text: str) -> ast.Module:
    """What pysource-minimize does: `0` (a node with no place) in place of expressions."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "block":
            node.args = [ast.Constant(0), ast.Constant(0), ast.Constant(0), ast.Constant(0)]
        if isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load) and len(node.elts) == 2:
            node.elts[1] = ast.Constant(0)
    return tree


def test_stand_ins_are_found_with_the_kind_they_stand_for() -> None:
    found = stand_ins.stand_ins({"m.py": _with_library_zeros(STAND_INS)}, {"m.py": ast.parse(STAND_INS)})
    kinds = sorted((s.field, s.index, s.kind) for s in found)
    assert kinds == [
        ("args", 0, "tensor"),
        ("args", 1, "int"),
        ("args", 2, "float"),
        ("args", 3, "str"),
        ("elts", 1, "tensor"),
    ]
    control = stand_ins.stand_ins(
        {"m.py": ast.parse(ast.unparse(_with_library_zeros(STAND_INS)))}, {"m.py": ast.parse(STAND_INS)}
    )
    assert control == []  # a 0 the user wrote (it has a place) is not a stand-in


def test_stand_ins_become_the_name_they_replaced_or_a_small_value_of_their_kind() -> None:
    search = Asked(STAND_INS)
    search.trees = {"m.py": _with_library_zeros(STAND_INS)}
    stand_ins.run(search)  # type: ignore[arg-type]
    assert "block(h, 0, 0.0, '')" in search.text  # the name it replaced; the int 0 stays an int
    refusing = Asked(STAND_INS, keep=lambda text: "block(h" not in text)
    refusing.trees = {"m.py": _with_library_zeros(STAND_INS)}
    stand_ins.run(refusing)  # type: ignore[arg-type]
    assert "block(torch.randn(1), 0, 0.0, '')" in refusing.text  # a small tensor, never 0


COMPILED = 'import torch\nf = torch.compile(lambda x: x, backend="eager", dynamic=False)\nf(torch.ones(1))\n'


def test_the_compile_call_gets_back_what_the_original_wrote() -> None:
    stripped = ast.parse(COMPILED.replace(', backend="eager", dynamic=False', ""))
    new = compile_call.as_written({"m.py": stripped}, {"m.py": ast.parse(COMPILED)}, "eager")
    assert new is not None and "torch.compile(lambda x: x, backend='eager', dynamic=False)" in ast.unparse(new["m.py"])  # type: ignore[arg-type]
    plain = "import torch\nf = torch.compile(lambda x: x)\nf(torch.ones(1))\n"
    said = compile_call.as_written({"m.py": ast.parse(plain)}, {"m.py": ast.parse(plain)}, "eager")
    assert said is not None
    call = next(compile_call.compile_calls(said["m.py"]))  # type: ignore[arg-type]
    assert ast.unparse(call) == "torch.compile(lambda x: x, backend='eager')"
    assert getattr(call, "casekit_note", "") == compile_call.EAGER_NOTE  # the file says why, on that line
    moded = plain.replace("lambda x: x)", "lambda x: x, mode='max-autotune')")
    assert compile_call.as_written({"m.py": ast.parse(moded)}, {"m.py": ast.parse(moded)}, "eager") is None
    assert compile_call.as_written({"m.py": ast.parse(plain)}, {"m.py": ast.parse(plain)}, "inductor") is None


DOCUMENTED = textwrap.dedent(
    '''
    """The module."""

    # the config's width
    WIDTH = 4  # in features


    class Layer:
        """A layer."""

        def forward(self, x):  # the break's frame
            # BUG: the break
            return x.item()

        def unused(self):
            """Gone."""
            return 1
    '''
).lstrip()


def test_comments_are_tied_to_the_statements_they_belong_to() -> None:
    index = OriginalIndex(DOCUMENTED)
    comments = read_comments(DOCUMENTED, index.tree, index.canonical)
    assert comments.above == {4: ("# the config's width",), 12: ("# BUG: the break",)}
    assert comments.trailing == {4: ("# in features",), 10: ("# the break's frame",)}


@pytest.mark.process  # ruff formats the finished text
def test_the_finished_rendering_writes_the_kept_statements_comments_and_docstrings_back() -> None:
    index = OriginalIndex(DOCUMENTED)
    reduced = ast.parse(DOCUMENTED)
    layer = next(n for n in reduced.body if isinstance(n, ast.ClassDef))
    layer.body = [n for n in layer.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    reduced.body = [layer]  # the docstrings and WIDTH went
    plain = render(reduced, index).text
    assert "#" not in plain and '"""' not in plain  # the control: ast.unparse has no comment
    restored = docstrings.with_docstrings({"m.py": reduced}, {"m.py": ast.parse(DOCUMENTED)})
    assert restored is not None
    text = render(restored["m.py"], index, finished=True).text  # type: ignore[arg-type]
    assert text.startswith('"""The module."""') and '    """A layer."""' in text and "Gone" not in text
    assert "def forward(self, x):  # the break's frame\n" in text
    assert "        # BUG: the break\n        return x.item()" in text
    assert "width" not in text and "in features" not in text  # WIDTH's line is not kept: nor its comments


def test_docstrings_and_comments_are_not_lines_of_code() -> None:
    assert count_code_lines(DOCUMENTED) == 6  # WIDTH, the class, two defs, two returns


def test_members_nothing_reads_go_and_their_classes_become_unread() -> None:
    text = textwrap.dedent(
        """
        class FFN:
            def forward(self, x):
                return x
        class Block:
            def __init__(self):
                self.attn = 1
                self.ffn = FFN()
                self.ffn.weight = 2
                self.register_buffer("cos", 3)
            def forward(self, x):
                return self.attn + x
            def num_parameters(self):
                return 0
        """
    )
    trees = without_unread_members({"m.py": ast.parse(text)})
    out = ast.unparse(trees["m.py"])  # type: ignore[arg-type]
    assert "self.ffn" not in out and "num_parameters" not in out
    assert "self.attn = 1" in out and "def forward" in out and "register_buffer('cos'" in out


def test_a_statement_that_is_a_value_alone_goes() -> None:
    tree = ast.parse("def f(x):\n    y = x\n    return y\n")
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    function.body.insert(1, ast.Expr(value=ast.Constant(0)))  # what pysource-minimize leaves of a statement
    assert "\n    0\n" in ast.unparse(tree)
    cleaned = stand_ins.without_bare_stand_ins({"m.py": tree})
    assert cleaned is not None and "0" not in ast.unparse(cleaned["m.py"])  # type: ignore[arg-type]
    # a value a pass left in a statement's place, with that place, goes too; a docstring and `...` stay
    placed = ast.parse('"""Doc."""\n\n\ndef f(x):\n    """Its doc."""\n    0\n    return x\n\n\nclass P:\n    ...\n')
    cleaned = stand_ins.without_bare_stand_ins({"m.py": placed})
    assert cleaned is not None and ast.unparse(cleaned["m.py"]).count("0") == 0  # type: ignore[arg-type]
    assert '"""Doc."""' in ast.unparse(cleaned["m.py"]) and '"""Its doc."""' in ast.unparse(cleaned["m.py"])  # type: ignore[arg-type]
    assert "..." in ast.unparse(cleaned["m.py"])  # type: ignore[arg-type]
    kept = '"""Doc."""\nclass P:\n    ...\n'
    assert stand_ins.without_bare_stand_ins({"m.py": ast.parse(kept)}) is None
    assert [b.lineno for b in stand_ins.bare_values(placed)] == [6]  # the checklist's rule


def test_pysource_minimize_is_patched_only_where_its_private_seam_is_the_one_casekit_knows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import copy as copy_module

    from pysource_minimize import _minimize_base

    from casekit.errors import CasekitError
    from casekit.reduce.passes import minimize

    monkeypatch.setattr(_minimize_base, "copy", copy_module)
    minimize.use_fast_copy()
    assert _minimize_base.copy is minimize._FastCopy  # the seam as pinned: replaced
    monkeypatch.setattr(_minimize_base, "copy", object())  # a release where the seam moved
    try:
        minimize.use_fast_copy()
    except CasekitError as error:
        assert "pins 0.11.0" in str(error)
    else:
        raise AssertionError("a moved seam was patched")


ROUTED = textwrap.dedent(
    """
    import torch

    class Router(torch.nn.Module):
        def forward(self, tokens) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            weights = tokens.softmax(-1)
            aux = weights.mean()
            if tokens.shape[0] > 4:
                return weights.to(tokens.dtype), weights.argmax(-1), aux
            return (weights, weights.argmax(-1), aux)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.router = Router()

        def forward(self, x):
            weights, experts, aux_loss = self.router(x)
            torch.bincount(experts.flatten())

    def split(x) -> Pair:
        return x[0], x[1]

    first, second = split(torch.randn(2, 3))
    print(first)
    Layer()(torch.randn(4, 3))
    """
)


def test_unread_results_go_from_the_returns_and_the_unpacking() -> None:
    router_forward = next(n for n in ast.walk(ast.parse(ROUTED)) if isinstance(n, ast.FunctionDef) and n.lineno == 5)
    call_line = next(i for i, line in enumerate(ROUTED.splitlines(), 1) if "self.router(x)" in line)
    search = Asked(ROUTED)
    search.facts = Facts(  # the original's run: Router.forward called through the instance on that line
        script="m.py",
        originals={"m.py": ROUTED},
        order=("m.py",),
        callers={("m.py", router_forward.lineno): frozenset({("m.py", call_line)})},
    )
    found = {(u.function[0], u.unread) for u in results.unused_results(search.trees, search.facts.callers)}
    assert found == {
        (router_forward.lineno, (0, 2)),
        (
            next(n.lineno for n in ast.walk(ast.parse(ROUTED)) if isinstance(n, ast.FunctionDef) and n.name == "split"),
            (1,),
        ),
    }
    results.run(search)  # type: ignore[arg-type]
    text = search.text
    assert "experts = self.router(x)" in text  # one name left: no tuple of one
    assert "return weights.argmax(-1)" in text and "aux" in text  # every return, each alone; `aux = ...` is unread's
    assert "first = split(torch.randn(2, 3))" in text and "return x[0]" in text
    # the annotation says what is returned now: the kept part's type, or nothing where it named the tuple
    assert "def forward(self, tokens) -> torch.Tensor:" in text and "def split(x):" in text
    # the control: a caller that reads every part, or a call used another way, leaves the function as it is
    for kept in ("print(weights, experts, aux_loss)", "print(self.router(x))"):
        reading = ROUTED.replace("torch.bincount(experts.flatten())", kept)
        assert all(
            u.function[0] != router_forward.lineno
            for u in results.unused_results({"m.py": ast.parse(reading)}, search.facts.callers)
        )


def test_a_stand_in_for_an_annotation_is_the_original_type_again() -> None:
    original = "import dataclasses\n\n@dataclasses.dataclass\nclass Config:\n    kinds: list[str] = dataclasses.field(default_factory=list)\n"
    minimized = ast.parse(original)
    statement = minimized.body[1].body[0]  # type: ignore[attr-defined]
    statement.annotation = ast.Constant(0)  # the library's 0, no place
    found = stand_ins.stand_ins({"m.py": minimized}, {"m.py": ast.parse(original)})
    assert [(s.field, s.kind) for s in found] == [("annotation", "type")]
    placed = ast.parse(original.replace("list[str]", "0"))  # a 0 with a place: a number is never a type either
    assert [(s.field, s.kind) for s in stand_ins.stand_ins({"m.py": placed}, {"m.py": ast.parse(original)})] == [
        ("annotation", "type")
    ]
    search = Asked(original)
    search.trees = {"m.py": minimized}
    stand_ins.run(search)  # type: ignore[arg-type]
    assert "kinds: list[str] = dataclasses.field(default_factory=list)" in search.text


def test_a_compile_call_moved_to_another_line_gets_its_keywords_on_that_line() -> None:
    # The original compiles on line 4 and calls on line 5; the reduction inlined the compile into line 5.
    original = "import torch\nmodel = torch.nn.ReLU()\n\ncompiled = torch.compile(model, backend='eager')\nprint(compiled(torch.ones(1)))\n"
    inlined = ast.parse("import torch\n\n\n\nprint(torch.compile(torch.nn.ReLU())(torch.ones(1)))\n")
    new = compile_call.as_written({"m.py": inlined}, {"m.py": ast.parse(original)}, "eager")
    assert new is not None
    kept = next(compile_call.compile_calls(new["m.py"]))  # type: ignore[arg-type]
    assert ast.unparse(kept) == "torch.compile(torch.nn.ReLU(), backend='eager')"
    # every node of the keyword sits on the kept call's line (5), none on the original compile line (4),
    # so the statement still maps to line 5 and the break's call path reads as the original's
    assert {node.lineno for node in ast.walk(kept.keywords[0]) if hasattr(node, "lineno")} == {5}
    assert render(new["m.py"], OriginalIndex(original)).lines == (1, 5)  # type: ignore[arg-type]


def test_a_function_left_returning_nothing_loses_its_return_annotation() -> None:
    """`def forward(...) -> torch.Tensor:` whose returns went with what followed the break says nothing of
    what it returns; `-> None`, a generator, a stub and a function still returning a value keep theirs."""
    text = textwrap.dedent(
        """
        import torch

        class Pool(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                x.tolist()

            def __init__(self) -> None:
                super().__init__()

            def rows(self, x) -> list:
                return x.tolist()

            def each(self, x) -> object:
                yield x

            def abstract(self) -> int:
                raise NotImplementedError
        """
    )
    stale = results.without_stale_annotations({"m.py": ast.parse(text)})
    assert stale is not None
    out = ast.unparse(stale["m.py"])  # type: ignore[arg-type]
    assert "def forward(self, x: torch.Tensor):" in out
    assert "-> None" in out and "-> list" in out and "-> object" in out and "-> int" in out
    assert results.without_stale_annotations(stale) is None
