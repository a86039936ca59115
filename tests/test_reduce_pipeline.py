"""The reduction's pipeline driven by a fake oracle at its interface (`TreeSearch`'s judge, and the
speculating explorer's batch judge): the order is the one list's, every pass proposes through one
question, and the result does not depend on `--jobs`.

The fake oracle runs a candidate as plain Python (no torch) and keeps it when it still calls
`graph_break()` through the same chain of functions as the original: the real oracle's "same break,
same call path" in miniature. tests/test_reduce.py runs the same pipeline on real torch.
"""

from __future__ import annotations

import ast
import sys
import textwrap
import warnings

import pytest

from casekit.reduce.explore.search import TreeSearch
from casekit.reduce.explore.speculate import SpeculativeSearch
from casekit.reduce.facts import Facts
from casekit.reduce.passes.statements import importers_first
from casekit.reduce.pipeline import PIPELINE, Rounds, last_step, run_pipeline, steps_for, tidy_steps
from casekit.reduce.source.candidate import Candidate
from casekit.reduce.source.format import formatted
from casekit.reduce.source.lines import count_code_lines

ORIGINAL = textwrap.dedent(
    '''\
    """A model in miniature: layers, a config, a loop over steps; the break three calls deep."""

    import math

    # every layer's scale
    SCALE = 3


    def unused_helper(x):
        """Never called."""
        return x * math.pi


    class Config:
        dim = 4
        depth = 3


    class Layer:
        """One layer: scales, then breaks."""

        def __init__(self, config, name):
            self.dim = config.dim  # the layer's width
            self.name = name

        def forward(self, x, offset):
            y = x * SCALE
            graph_break()  # BUG: the break
            return y + offset


    class Model:
        def __init__(self, config):
            self.layers = [Layer(config, f"l{i}") for i in range(config.depth)]

        def forward(self, x):
            for layer in self.layers:
                x = layer.forward(x, 1)
            return x


    def main():
        model = Model(Config())
        for step in range(3):
            print(step, model.forward(step))


    main()
    '''
)


def break_path(text: str) -> tuple[str, ...] | None:
    """The functions `graph_break()` is called through when the text runs (None: it fails or never breaks)."""
    seen: list[tuple[str, ...]] = []

    def graph_break() -> None:
        frame, names = sys._getframe(1), []
        while frame is not None and frame.f_code.co_filename == "<candidate>":
            names.append(frame.f_code.co_name)
            frame = frame.f_back  # type: ignore[assignment]
        seen.append(tuple(names))

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a candidate such as `0()` compiles with a SyntaxWarning
            exec(compile(text, "<candidate>", "exec"), {"graph_break": graph_break, "print": lambda *a: None})
    except Exception:
        return None
    return seen[0] if seen else None


class FakeOracle:
    """Keeps a candidate whose script file still breaks through the original's call path; counts questions."""

    def __init__(self, script: str = "m.py") -> None:
        self.script = script
        self.path = break_path(ORIGINAL)
        self.asked: list[str] = []

    def __call__(self, candidate: Candidate) -> bool:
        rendered = candidate.files[self.script]
        assert rendered is not None
        self.asked.append(rendered.text)
        return break_path(rendered.text) == self.path

    def batch(self, candidates: list[Candidate]) -> list[bool]:
        return [self(c) for c in candidates]


def facts_for(text: str, name: str = "m.py") -> Facts:
    return Facts(script=name, originals={name: text}, order=tuple(importers_first(name, {name: text})))


def test_the_original_breaks_three_calls_deep() -> None:
    assert break_path(ORIGINAL) == ("forward", "forward", "main", "<module>")


def test_one_list_says_the_order_and_the_request_picks_from_it() -> None:
    names = [s.name for e in PIPELINE for s in (e.steps if isinstance(e, Rounds) else (e,))]
    every = steps_for(True)
    assert list(every) == list(dict.fromkeys(names))  # the pipeline's order, each step once
    without_inputs = steps_for(False)
    assert "inputs of the compiled call written as literals" in every
    assert "inputs of the compiled call written as literals" not in without_inputs
    assert [n for n in every if n in without_inputs] == list(without_inputs)
    assert every[0] == "code the original never ran" and every[-1] == "comments of the kept lines, formatted"


def test_the_search_asks_in_pipeline_order(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    oracle = FakeOracle()
    search = TreeSearch(facts_for(ORIGINAL), {"m.py": ast.parse(ORIGINAL)}, oracle, said.append)
    names = [n for n in steps_for(True) if n != "comments of the kept lines, formatted"]  # no ruff: no process
    run_pipeline(search, names)
    firsts = list(dict.fromkeys(said))
    assert firsts == [n for n in names if n in firsts]  # each step first said in the list's order
    result = ast.unparse(search.trees["m.py"])  # type: ignore[arg-type]
    assert break_path(result) == oracle.path
    assert "unused_helper" not in result and "math" not in result
    assert "def __init__(self, config, name)" not in result  # unused parameters went, with their arguments
    assert "Layer(config" not in result
    assert count_code_lines(result) < count_code_lines(ORIGINAL) / 2


@pytest.mark.process
def test_the_result_is_finished_with_the_kept_lines_comments_and_formatted() -> None:
    oracle = FakeOracle()
    search = TreeSearch(facts_for(ORIGINAL), {"m.py": ast.parse(ORIGINAL)}, oracle)
    run_pipeline(search, steps_for(True))
    text = oracle.asked[-1]
    assert search.finished and break_path(text) == oracle.path
    assert "graph_break()  # BUG: the break" in text  # a comment on a kept line, from the original
    assert '"""One layer: scales, then breaks."""' in text  # a kept class's docstring
    assert text.startswith('"""A model in miniature')  # the module's
    assert "# the layer's width" not in text  # its line went
    assert '"Never called."' not in text
    assert formatted(text) == text and formatted(ast.unparse(ast.parse(text))) != ast.unparse(ast.parse(text))


@pytest.mark.process
@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_the_explorers_find_what_one_search_finds_whatever_the_jobs(jobs: int) -> None:
    """Speculation must not change the result: the explorer told "kept" goes on from the kept candidate.

    The reference is the same pipeline in this process with a direct oracle. Telling the explorer
    "refused" for a candidate the reducer kept (speculate.py's resolve) makes the explorer go on from
    the older trees: its questions and its last result differ from the reference's, and this fails."""
    names = [n for n in steps_for(True) if n != "comments of the kept lines, formatted"]
    reference = FakeOracle()
    local = TreeSearch(facts_for(ORIGINAL), {"m.py": ast.parse(ORIGINAL)}, reference)
    run_pipeline(local, names)
    expected = [text for text in reference.asked if break_path(text) == reference.path]

    oracle = FakeOracle()
    kept: list[Candidate] = []
    start = {"facts": facts_for(ORIGINAL), "trees": {"m.py": ast.parse(ORIGINAL)}, "steps": names}
    search = SpeculativeSearch(start, oracle.batch, jobs, kept.append)
    assert search.run()
    texts = [c.files["m.py"].text for c in kept]  # type: ignore[union-attr]
    assert texts == expected  # the same candidates kept, in the same order
    assert texts[-1] == ast.unparse(local.trees["m.py"]) + "\n"  # type: ignore[arg-type]
    if jobs > 1:
        assert search.stats.speculated > 0


@pytest.mark.process
def test_when_the_time_for_reducing_is_up_only_the_tidy_steps_are_judged() -> None:
    """Time is up from the start: every reducing step's question is refused unrun, and the explorer goes on
    to the tidy steps, which are judged: the result is the original, finished (what nothing reads out, its
    comments, formatted)."""
    oracle = FakeOracle()
    kept: list[Candidate] = []
    phases: list[str] = []
    start = {"facts": facts_for(ORIGINAL), "trees": {"m.py": ast.parse(ORIGINAL)}, "steps": steps_for(True)}
    search = SpeculativeSearch(
        start, oracle.batch, 2, kept.append, phases.append, cut_short=lambda: True, finishing=tidy_steps()
    )
    assert search.run()
    assert phases[-1] in tidy_steps()
    assert 0 < len(oracle.asked) <= 5  # only the tidy steps' candidates ran
    final = kept[-1].files["m.py"].text  # type: ignore[union-attr]
    assert "graph_break()  # BUG: the break" in final and "def unused_helper(x):" not in final  # nothing read it
    assert "for step in range(3):" in final and "y = x * SCALE" in final  # what the reducing steps cut stays
    assert formatted(final) == final and 'f"l{i}"' in final  # formatted: ruff's quotes, not ast.unparse's


@pytest.mark.process
def test_past_the_deadline_only_the_last_step_is_judged_and_the_result_is_still_written_out() -> None:
    oracle = FakeOracle()
    kept: list[Candidate] = []
    start = {"facts": facts_for(ORIGINAL), "trees": {"m.py": ast.parse(ORIGINAL)}, "steps": steps_for(True)}
    search = SpeculativeSearch(
        start, oracle.batch, 2, kept.append, should_stop=lambda: True, finishing=tidy_steps(), last=last_step()
    )
    assert search.run()
    assert len(oracle.asked) == 1 and len(kept) == 1  # the finished original, nothing else ran
    assert "graph_break()  # BUG: the break" in oracle.asked[0]
    stopped = SpeculativeSearch(start, oracle.batch, 2, kept.append, should_stop=lambda: True)
    assert not stopped.run() and len(oracle.asked) == 1  # the control: without `last`, nothing is judged
