"""The capture summary (`casekit show`, a capture's output, the case page) reads as a person needs it.

The starter bundles were captured for real on torch 2.13.0 (cases/); the rules are checked on observations
made up around them. tests/test_capture_live.py captures a script for real and checks the same words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from casekit.bundle import load_case
from casekit.model import Recompile, ScriptObservation, ScriptRole, ScriptStatus, Site
from casekit.report.html import checks_html, recompiles_html
from casekit.report.text import case_summary, fullgraph_kind, guard_failure

STARTER = Path(__file__).resolve().parent.parent / "cases"


def _site(line: int, category: str, source: str = "") -> Site:
    return Site("repro.py", line, "step", source, category, reason="", gb_id=category)


def test_one_graph_beside_a_break_says_why_both_are_true() -> None:
    """nonzero-dynamic: 1 break by default, one graph with fullgraph=True (2.13 keeps the shape in the graph)."""
    case = load_case(STARTER / "nonzero-dynamic.toml")
    pre = case.observations[ScriptRole.PRE]
    assert len(pre.sites) == 1 and pre.fullgraph is None and pre.fullgraph_status  # what the summary explains
    summary = case_summary(case)
    assert (
        "fullgraph=True: compiles as one graph, though the default run breaks 1 time(s): fullgraph=True keeps in "
        "its graph what the default fullgraph=False breaks on: a data-dependent shape (`nonzero`, `unique`, a boolean "
        "mask) at repro.py:7 (as capture_dynamic_output_shape_ops=True would)"
    ) in summary
    assert "compiles as one graph, though" in checks_html(pre)  # the case page says the same
    post = case.observations[ScriptRole.POST]
    assert not post.sites and fullgraph_kind(post) == "compiles as one graph"  # nothing to explain


def test_a_break_fullgraph_does_not_keep_is_named_not_explained_away() -> None:
    printed = ScriptObservation(ScriptStatus.OK, sites=[_site(6, "GB0059"), _site(8, "GB0124")], fullgraph_status="ok")
    said = fullgraph_kind(printed)
    assert "the value `.item()` returns at repro.py:8" in said
    assert "the break(s) at repro.py:6 did not stop fullgraph=True on this release" in said


def test_a_recompile_names_its_compile_id_and_the_float_that_changed() -> None:
    case = load_case(STARTER / "item-branch.toml")
    pre = case.observations[ScriptRole.PRE]
    [line] = [line for line in case_summary(case).splitlines() if line.strip().startswith("recompile:")]
    assert ": 1/0:" not in line and "guard of compile [1/0] failed: ___stack0 == 6.57" in line
    assert "recompiled because the value `.item()` returned at repro.py:8 changed" in line
    assert "guard of compile [1/0] failed" in recompiles_html(pre)  # the case page's table too


@pytest.mark.parametrize(
    ("function", "guard", "said"),
    [
        ("apply", "0/1: L['scale'] == 0.5", "recompiled because the float `scale` changed"),
        (
            "step",
            "2/0: scale == 2.1152193546295166",
            "the float `scale`, the value `.item()` returned at repro.py:5, changed",
        ),
        ("step", "0/0: L['self']._modules['norm'].eps == 1e-05", "the float `self.norm.eps` changed"),
        ("step", "1/0: ___stack0 == 3.25", "a float the code before repro.py:12 returned changed"),
    ],
)
def test_a_guard_on_a_float_says_which_value_changed(function: str, guard: str, said: str) -> None:
    """`scale` in `apply` is its own parameter; in `step`, the variable the `.item()` line there assigned."""
    observation = ScriptObservation(ScriptStatus.OK, sites=[_site(5, "GB0124", "scale = x.max().item()")])
    recompile = Recompile(function, "repro.py", 12, [guard])
    text = guard_failure(guard, recompile, observation)
    assert said in text and "Dynamo guards a Python float by its value" in text
    assert text.startswith(f"guard of compile [{guard.split(':')[0]}] failed: ")


@pytest.mark.parametrize(
    "guard",
    ["0/0: L['n'] == 3", "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 6", "0/0: L['mode'] == 'train'"],
)
def test_a_guard_on_anything_but_a_float_is_not_explained_as_one(guard: str) -> None:
    text = guard_failure(guard, Recompile("step", "repro.py", 5, [guard]), ScriptObservation(ScriptStatus.OK))
    assert text == f"guard of compile [0/0] failed: {guard[len('0/0: ') :]}"
