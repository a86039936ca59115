"""The reducer's coarse passes before pysource-minimize: whole statements out (halves first, body by
body, a compound statement replaced by its body) and config literals written in place.

Pure tree functions, tested with an `ask` that stands in for the oracle by a rule over the source
(what must still be there); the real oracle's runs are tests/test_reduce.py's."""

from __future__ import annotations

import ast
import copy
import textwrap

from casekit.reduce.passes.literals import class_literals, inline_literals
from casekit.reduce.passes.statements import body_paths, reduce_statements

SCRIPT = textwrap.dedent(
    """
    import math
    import os

    def unused(a):
        return a + 1

    class Model:
        def __init__(self):
            self.scale = 2
            self.extra = 3

        def forward(self, x):
            y = x * self.scale
            if x > 0:
                for i in range(3):
                    z = breaks_here(y)
            w = 5
            return z

    def breaks_here(v):
        return v

    print(Model().forward(1))
    """
)


def needs(*fragments: str):
    """An oracle by rule: the candidate is kept while it compiles, runs and prints what the original did."""
    asked: list[str] = []

    def ask(tree: ast.Module) -> bool:
        text = ast.unparse(tree)
        asked.append(text)
        if not all(f in text for f in fragments):
            return False
        printed: list[object] = []
        try:
            exec(compile(text, "<candidate>", "exec"), {"print": printed.append})
        except Exception:
            return False
        return printed == [2]

    return ask, asked


def test_statements_out_body_by_body_and_compound_statements_replaced_by_their_bodies() -> None:
    ask, asked = needs("breaks_here(y)")
    reduced = ast.unparse(reduce_statements(ast.parse(SCRIPT), ask, copy.deepcopy))
    assert "import" not in reduced and "unused" not in reduced and "extra" not in reduced and "w = 5" not in reduced
    assert "if x > 0" not in reduced and "for i in" not in reduced  # hoisted: the call is in forward's body
    assert "z = breaks_here(y)" in reduced and "self.scale = 2" in reduced
    assert len(asked) < 60  # halves first: far fewer questions than one per statement and subset


def test_a_body_emptied_becomes_pass_and_the_outer_bodies_go_first() -> None:
    tree = ast.parse(SCRIPT)
    kinds = [key[0] for _, key in body_paths(tree)]
    assert kinds[0] == "Module" and kinds.index("ClassDef") < kinds.index("If") < kinds.index("For")
    ask, _ = needs("class Model", "def forward", "print")

    def keeps_forward_callable(tree: ast.Module) -> bool:
        text = ast.unparse(tree)
        return all(f in text for f in ("class Model", "def forward", "print(Model().forward(1))"))

    reduced = ast.unparse(reduce_statements(ast.parse(SCRIPT), keeps_forward_callable, copy.deepcopy))
    assert "def forward(self, x):\n        pass" in reduced


def test_refused_everywhere_keeps_the_original() -> None:
    tree = ast.parse(SCRIPT)
    assert ast.dump(reduce_statements(tree, lambda candidate: False, copy.deepcopy)) == ast.dump(ast.parse(SCRIPT))


CONFIGURED = textwrap.dedent(
    """
    from dataclasses import dataclass

    @dataclass
    class Config:
        dim: int = 4
        eps: float = -1e-5
        name = "tiny"
        layers: list = None

    class Other:
        dim = 4

    def build(config, x):
        return [config.dim, config.eps, config.name, x.dim(), config.layers]

    print(build(Config(), [1]))
    """
)


def test_class_literals_are_the_fields_with_literal_values_agreed_by_every_class() -> None:
    values = class_literals({"m.py": ast.parse(CONFIGURED)})
    assert {n: ast.unparse(v) for n, v in values.items()} == {
        "dim": "4",
        "eps": "-1e-05",
        "name": "'tiny'",
        "layers": "None",
    }
    clashing = CONFIGURED.replace("class Other:\n    dim = 4", "class Other:\n    dim = 8")
    assert "dim" not in class_literals({"m.py": ast.parse(clashing)})
    # containers of literals, and what a dataclass field gives each instance; a factory that computes is not one
    fields = textwrap.dedent(
        """
        import dataclasses
        from dataclasses import field

        @dataclasses.dataclass
        class Config:
            kinds: list[str] = field(default_factory=lambda: ["dense", "moe"])
            shape: tuple = (2, -3)
            scale: float = dataclasses.field(default=0.5)
            seen: list = field(default_factory=list)
            made: list = field(default_factory=lambda: [make()])
        """
    )
    assert {n: ast.unparse(v) for n, v in class_literals({"m.py": ast.parse(fields)}).items()} == {
        "kinds": "['dense', 'moe']",
        "shape": "(2, -3)",
        "scale": "0.5",
    }


def test_literals_written_in_place_of_reads_not_of_method_calls_and_refused_ones_stay() -> None:
    asked: list[str] = []

    def ask(trees: dict[str, ast.Module | None]) -> bool:
        text = ast.unparse(trees["m.py"])  # type: ignore[arg-type]
        asked.append(text)
        return "config.name" in text  # the oracle refuses any candidate without this read

    trees = inline_literals({"m.py": ast.parse(CONFIGURED)}, ask, copy.deepcopy)
    text = ast.unparse(trees["m.py"])  # type: ignore[arg-type]
    assert "return [4, -1e-05, config.name, x.dim(), None]" in text
    assert len(asked) <= 6  # all at once, then halves: not one question per subset


VARIABLES = textwrap.dedent(
    """
    def forward(t, w):
        x = t + 1
        gated = x
        total = 0
        for i in range(2):
            total = total + i
        y = gated * w
        return y + total

    print(forward(1, 2))
    """
)


def test_single_use_variables_are_written_where_they_are_read_at_that_place() -> None:
    from casekit.reduce.passes.variables import inline_variables, single_use

    tree = ast.parse(VARIABLES)
    assert sorted(line for line, _ in single_use(tree)) == [3, 4, 8]  # not `total` (assigned twice)
    asked: list[str] = []

    def ask(candidate: ast.Module) -> bool:
        text = ast.unparse(candidate)
        asked.append(text)
        printed: list[object] = []
        exec(compile(text, "<candidate>", "exec"), {"print": printed.append})
        return printed == [5]

    reduced = inline_variables(tree, ask, copy.deepcopy)
    text = ast.unparse(reduced)
    assert "return (t + 1) * w + total" in text
    assert "x =" not in text and "gated =" not in text and "y =" not in text
    read = next(
        n
        for n in ast.walk(reduced)
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Add)
        and isinstance(n.right, ast.Constant)
        and n.right.value == 1
    )
    assert read.lineno == 9  # the value now sits on the reading line (the pairing sees that line)


def test_a_stand_in_written_in_place_is_still_a_stand_in() -> None:
    from casekit.reduce.passes.stand_ins import TENSOR, stand_ins
    from casekit.reduce.passes.variables import inline_variables

    original = "import torch\n\ndef route(x):\n    w = x.softmax(-1)\n    return (w, x)\n"
    tree = ast.parse(original)
    value = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign)).value
    assign = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign))
    assign.value = ast.Constant(value=0)  # what pysource-minimize writes: a 0 with no place
    assert value is not None
    reduced = inline_variables(tree, lambda candidate: True, copy.deepcopy)
    assert "return (0, x)" in ast.unparse(reduced)
    found = stand_ins({"m.py": reduced}, {"m.py": ast.parse(original)})
    assert [s.kind for s in found] == [TENSOR]  # the returned tensor's stand-in, seen for what it is


def test_a_field_read_that_no_method_sets_any_more_is_seen_without_running() -> None:
    from casekit.reduce.explore.search import unset_attributes

    model = textwrap.dedent(
        """
        class Block:
            scale = 2
            def __init__(self):
                self.norm = 1
            def forward(self, x):
                return self.norm + self.scale + self.training + x
        """
    )
    assert unset_attributes(ast.parse(model)) == {("Block", "training")}  # a base class's, maybe: left to runs
    without_norm = model.replace("self.norm = 1", "pass")
    assert unset_attributes(ast.parse(without_norm)) - unset_attributes(ast.parse(model)) == {("Block", "norm")}


def test_files_are_reduced_importers_first_so_a_use_goes_before_its_definition() -> None:
    from casekit.reduce.passes.statements import importers_first

    texts = {
        "pkg/layers.py": "import torch\n",
        "pkg/__init__.py": "",
        "pkg/model.py": "from .layers import Gate\nfrom . import util\n",
        "pkg/util.py": "X = 1\n",
        "main.py": "from pkg.model import Model\n",
        "pkg/unused.py": "Y = 2\n",
    }
    order = importers_first("main.py", texts)
    assert order[:2] == ["main.py", "pkg/model.py"]
    assert order.index("pkg/layers.py") > order.index("pkg/model.py") < order.index("pkg/util.py")
    assert sorted(order) == sorted(texts) and order[-1] in ("pkg/unused.py", "pkg/__init__.py")


def test_a_statement_on_the_break_s_call_path_is_never_asked_about_without_it() -> None:
    ask, asked = needs("breaks_here(y)")
    on_path = next(
        n.lineno for n in ast.walk(ast.parse(SCRIPT)) if isinstance(n, ast.Assign) and "breaks_here" in ast.unparse(n)
    )

    def stays(statement: ast.stmt) -> bool:
        return statement.lineno <= on_path <= (statement.end_lineno or statement.lineno)

    reduced = ast.unparse(reduce_statements(ast.parse(SCRIPT), ask, copy.deepcopy, stays=stays))
    assert "z = breaks_here(y)" in reduced
    assert all("breaks_here(y)" in text for text in asked)  # no question without it: no run wasted
    control_ask, control_asked = needs("breaks_here(y)")
    reduce_statements(ast.parse(SCRIPT), control_ask, copy.deepcopy)
    assert any("breaks_here(y)" not in text for text in control_asked)  # without `stays`, such runs are asked


MODEL = textwrap.dedent(
    """
    from __future__ import annotations
    import torch.nn as nn
    from speech.config import Config
    from speech.layers import Conv, Pool, Unused

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = Pool()
    """
)
LAYERS = textwrap.dedent(
    """
    import torch.nn as nn
    import math

    def helper(x):
        return math.sqrt(x)

    class Conv(nn.Module):
        def forward(self, x):
            return helper(x)

    class Pool(nn.Module):
        def forward(self, x):
            return x.tolist()

    class Unused:
        pass

    REGISTRY = {"pool": Pool}
    print("imported")
    """
)


def _multifile() -> dict[str, ast.Module | None]:
    script = "from speech.model import Encoder\nEncoder()(1)\n"
    return {
        "run.py": ast.parse(script),
        "speech/model.py": ast.parse(MODEL),
        "speech/layers.py": ast.parse(LAYERS),
        "speech/config.py": ast.parse("class Config:\n    dim = 4\n"),
    }


def test_an_included_module_loses_what_no_file_imports_or_reads_and_imports_keep_only_the_names_read() -> None:
    """The bindings of included files too (a reduction of a model spread over files left unread classes in
    its layers file, imported by name but never used): `from m import a, b` keeps `b` alone when only `b` is
    read; a class or function of an included module stays while another file imports it, reads an attribute
    of that name or names it in a string; statements that do more than bind (a print) stay."""
    from casekit.reduce.passes.unread import without_unread

    trees = _multifile()
    before = {name: ast.dump(tree) for name, tree in trees.items() if tree is not None}
    out = without_unread(trees, "run.py", True)
    model, layers = ast.unparse(out["speech/model.py"]), ast.unparse(out["speech/layers.py"])  # type: ignore[arg-type]
    assert "from speech.layers import Pool\n" in model + "\n" and "Config" not in model
    assert "class Pool" in layers and "REGISTRY" not in layers and "print('imported')" in layers
    assert "class Conv" not in layers and "def helper" not in layers and "import math" not in layers
    assert "class Unused" not in layers
    assert {name: ast.dump(tree) for name, tree in trees.items() if tree is not None} == before  # not changed
    # another file's attribute read or string keeps the name; a star import keeps everything
    trees["run.py"] = ast.parse("import speech.layers as layers\nfrom speech.model import Encoder\nlayers.Conv\n")
    assert "class Conv" in ast.unparse(without_unread(trees, "run.py", True)["speech/layers.py"])  # type: ignore[arg-type]
    trees["run.py"] = ast.parse("from speech.layers import *\nfrom speech.model import Encoder\nEncoder()\n")
    assert "class Unused" in ast.unparse(without_unread(trees, "run.py", True)["speech/layers.py"])  # type: ignore[arg-type]


class _RecordingSearch:
    """Records the questions a pass asks and refuses them all (the Search interface at its boundary)."""

    def __init__(self, trees: dict[str, ast.Module | None], order: tuple[str, ...]) -> None:
        from casekit.reduce.facts import Facts

        self.facts = Facts(script=order[0], originals={}, order=order)
        self.trees = trees
        self.asked: list[dict[str, ast.Module | None]] = []

    def ask(self, trees: dict[str, ast.Module | None]) -> bool:
        self.asked.append(dict(trees))
        return False

    def say(self, phase: str) -> None:
        pass

    def finishing(self, on: bool) -> None:
        pass


def test_the_tidy_stage_drops_in_one_candidate_the_included_files_no_import_names() -> None:
    from casekit.reduce.passes.files import unimported
    from casekit.reduce.passes.unread import without_unread

    order = ("run.py", "speech/model.py", "speech/layers.py", "speech/config.py")
    search = _RecordingSearch(without_unread(_multifile(), "run.py", True), order)
    unimported(search)
    assert search.asked == [{"speech/config.py": None}]  # model.py no longer imports it; layers.py still is
    search = _RecordingSearch(_multifile(), order)
    unimported(search)
    assert search.asked == []  # every included file is still named by an import


def test_a_local_left_unread_goes_though_an_attribute_of_that_name_is_read() -> None:
    """In a function, only a plain name reads a local: `capacity = self.capacity(n)` left unread goes (its
    call kept as a statement), where reading the attribute `.capacity` used to keep the binding."""
    from casekit.reduce.passes.unread import without_unread

    text = "class F:\n    def forward(self, x):\n        capacity = self.capacity(x)\n        return x\n\n\nF().forward(1)\n"
    out = ast.unparse(without_unread({"m.py": ast.parse(text)}, "m.py", False)["m.py"])  # type: ignore[arg-type]
    assert "capacity =" not in out and "self.capacity(x)" in out
    read = text.replace("return x", "return capacity")
    assert "capacity = self.capacity(x)" in ast.unparse(
        without_unread({"m.py": ast.parse(read)}, "m.py", False)["m.py"]
    )  # type: ignore[arg-type]
