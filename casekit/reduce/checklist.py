"""What a finished result must show, checked on the files written: the checklist the bench and the tests
run (the standalone run in torch's own log is theirs: it needs torch).

- no unused parameter (`passes/parameters.py`'s rule);
- no stand-in `0` where the original had a value of another kind (`passes/stand_ins.py`'s rule), and no
  statement that is a value alone (a `0` left where a statement was);
- every compile call with the keywords the original's wrote, and a `backend="eager"` it did not
  write explained on its line;
- every comment of the original's kept statements, and the kept definitions' docstrings;
- formatted: `ruff format` leaves the text as it is (when ruff is installed).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from casekit.reduce.passes.compile_call import EAGER_NOTE, compile_calls
from casekit.reduce.passes.docstrings import DEFINITIONS
from casekit.reduce.passes.parameters import unused_parameters
from casekit.reduce.passes.stand_ins import INT, UNKNOWN, bare_values, stand_ins
from casekit.reduce.source.candidate import Candidate
from casekit.reduce.source.format import formatted, ruff_available
from casekit.reduce.source.lines import OriginalIndex


def checklist(result: Candidate, originals: Mapping[str, str]) -> list[str]:
    """What the result misses, one line each (empty: it passes)."""
    problems: list[str] = []
    trees = {name: tree for name, tree in result.trees.items()}
    for unused in unused_parameters(trees):
        problems.append(f"{unused.file}: {unused.name}() has an unused parameter {unused.parameter!r}")
    parsed = {name: ast.parse(text) for name, text in originals.items()}
    for stand_in in stand_ins(trees, parsed):
        if stand_in.kind not in (INT, UNKNOWN):
            problems.append(f"{stand_in.file}:{stand_in.parent[1]}: a 0 stands for a {stand_in.kind}")
    for name, tree in trees.items():
        if tree is not None and name in parsed:
            problems.extend(f"{name}: {p}" for p in _docstrings(tree, parsed[name]))
        for bare in bare_values(tree) if tree is not None else ():
            problems.append(f"{name}:{getattr(bare, 'lineno', '?')}: a statement that is a value alone")
    for name, rendered in result.files.items():
        if rendered is None or name not in originals:
            continue
        problems.extend(f"{name}: {p}" for p in _compile_call(rendered.text, originals[name]))
        problems.extend(
            f"{name}: {p}" for p in _comments(rendered.text, rendered.lines, OriginalIndex(originals[name]))
        )
        if ruff_available() and formatted(rendered.text) != rendered.text:
            problems.append(f"{name}: not formatted (ruff format would change it)")
    return problems


def _compile_call(text: str, original: str) -> list[str]:
    written = list(compile_calls(ast.parse(original)))
    problems = []
    for call in compile_calls(ast.parse(text)):
        keywords = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
        for source in written[:1] if len(written) == 1 else []:
            for keyword in source.keywords:
                if keyword.arg and keywords.get(keyword.arg) != ast.unparse(keyword.value):
                    problems.append(f"the compile call lost {keyword.arg}={ast.unparse(keyword.value)}")
            wrote = {k.arg for k in source.keywords}
            if "backend" in keywords and "backend" not in wrote and EAGER_NOTE not in text:
                problems.append("the compile call says a backend the original did not, without saying why")
    return problems


def _comments(text: str, lines: tuple[int, ...], index: OriginalIndex) -> list[str]:
    kept = set(lines) - {0}
    comments = index.comments
    problems = []
    for line in sorted(kept):
        for comment in (*comments.above.get(line, ()), *comments.trailing.get(line, ())):
            if comment.strip() not in text:
                problems.append(f"the comment {comment.strip()!r} of kept line {line} is gone")
    return problems


def _docstrings(tree: ast.Module, original: ast.Module) -> list[str]:
    documented = {
        (n.lineno, n.col_offset, n.name): ast.get_docstring(n, clean=False)
        for n in ast.walk(original)
        if isinstance(n, DEFINITIONS)
    }
    return [
        f"{node.name} lost its docstring"
        for node in ast.walk(tree)
        if isinstance(node, DEFINITIONS)
        and documented.get((node.lineno, node.col_offset, node.name))
        and not ast.get_docstring(node, clean=False)
    ]
