"""The reducer's first cut: the statements the original never ran, from the probe's own line trace."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

from casekit.probe import LineTrace
from casekit.reduce.passes.unrun import without_unrun

SOURCE = """\
import math


def called(x):
    if x > 10:
        return x * 2
    return x + 1


def never_called(x):
    return math.sqrt(x)


class Shape:
    def used(self):
        return 1

    def unused(self):
        return 2


try:
    VALUE = called(3) + Shape().used()
except ZeroDivisionError:
    VALUE = -1
if VALUE > 100:
    print("never")
else:
    RESULT = VALUE
"""


def trace(tmp_path: Path, source: str, name: str = "script.py") -> dict[str, set[int]]:
    """The probe's LineTrace over a real run of `source` (in this process, as the probe's child does)."""
    return {key: set(value) for key, value in traced(tmp_path, source, name).report().items()}


def traced(tmp_path: Path, source: str, name: str = "script.py") -> LineTrace:
    script = tmp_path / name
    script.write_text(source)
    lines = LineTrace(str(tmp_path))
    sys.path.insert(0, str(tmp_path))
    lines.start()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.settrace(None)
        sys.path.remove(str(tmp_path))
    return lines


def test_the_lines_run_are_traced_in_the_folder_only(tmp_path: Path) -> None:
    ran = trace(tmp_path, SOURCE)
    assert set(ran) == {"script.py"}  # no library file (math, runpy) is traced
    lines = SOURCE.splitlines()
    assert lines.index("    return x + 1") + 1 in ran["script.py"]
    assert lines.index("        return x * 2") + 1 not in ran["script.py"]
    assert lines.index("    return math.sqrt(x)") + 1 not in ran["script.py"]


def test_what_never_ran_is_cut_and_the_rest_still_runs(tmp_path: Path) -> None:
    ran = trace(tmp_path, SOURCE)
    tree = without_unrun({"script.py": ast.parse(SOURCE)}, ran, "script.py")["script.py"]
    assert tree is not None
    text = ast.unparse(tree)
    assert "never_called" not in text and "def unused" not in text and "x * 2" not in text
    assert "print('never')" not in text and "ZeroDivisionError" in text  # a handler's body became pass
    assert "def called" in text and "def used" in text and "RESULT = VALUE" in text
    namespace = runpy.run_path(str(_write(tmp_path / "cut.py", text)), run_name="__main__")
    assert namespace["RESULT"] == 5


def test_an_included_file_never_imported_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "used.py").write_text("A = 1\n")
    (tmp_path / "unused.py").write_text("B = 2\n")
    ran = trace(tmp_path, "import used\nprint(used.A)\n")
    assert set(ran) == {"script.py", "used.py"}
    trees = {name: ast.parse((tmp_path / name).read_text()) for name in ("script.py", "used.py", "unused.py")}
    cut = without_unrun(trees, ran, "script.py")
    assert cut["unused.py"] is None and cut["used.py"] is not None and cut["script.py"] is not None


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_each_function_s_nearest_caller_in_the_folder_is_recorded_through_library_frames(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("class Leaf:\n    def __deepcopy__(self, memo):\n        return Leaf()\n")
    source = (
        "import copy\nimport helper\n\n\ndef outer(leaf):\n    return copy.deepcopy(leaf)\n\n\nouter(helper.Leaf())\n"
    )
    lines = traced(tmp_path, source)
    edges = {tuple(edge) for edge in lines.report_callers()}
    # copy.py's frames are skipped: __deepcopy__'s caller is outer's line 6
    assert ("helper.py", 2, "script.py", 6) in edges
    assert ("script.py", 5, "script.py", 9) in edges
    assert not any(edge[2] not in {"script.py", "helper.py"} for edge in edges)
