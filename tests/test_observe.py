"""Reading Dynamo's output from real runs of two releases far apart (recorded fixtures).

The fixtures are raw probe results recorded with tests/fixtures/record_probe_fixtures.py
on torch 2.13.0 and 2.5.1; test_probe_live.py runs the same scripts live.
"""

from __future__ import annotations

import json

import pytest

from casekit.observe import interpret
from casekit.observe.logs import parse_frames, parse_graph_break, parse_recompile, parse_wont_convert
from casekit.observe.reasons import categorize, legacy_key, named_subject, normalize_function

from .conftest import FIXTURES
from .fakes import observe

RELEASES = ["2.5.1", "2.13.0"]


@pytest.mark.parametrize("release", RELEASES)
def test_item_and_print_breaks_have_the_same_identity_in_both_releases(release):
    observation = observe(release, "breaks")
    sites = {(s.file, s.line, s.function, s.category) for s in observation.sites}
    assert sites == {("breaks.py", 6, "step", "GB0124"), ("breaks.py", 8, "step", "GB0059")}
    assert observation.graphs == 6
    # recompiles are kept apart from breaks, resume functions named after the user's function
    assert [(r.function, r.line) for r in observation.recompiles] == [("step", 3), ("step", 6), ("step", 8)]
    assert observation.check.allclose is True and observation.check.compared == 4


def test_wording_differs_but_category_does_not():
    old, new = observe("2.5.1", "breaks").sites[0], observe("2.13.0", "breaks").sites[0]
    assert old.reason == "Tensor.item"
    assert new.reason.startswith("Unsupported Tensor.item() call with capture_scalar_outputs=False")
    assert new.gb_id == "GB0124" and old.gb_id is None
    assert old.category == new.category == "GB0124"


@pytest.mark.parametrize("release", RELEASES)
def test_data_dependent_branch_is_found_even_when_not_logged(release):
    # 2.5.1 never wrote data-dependent jumps to the graph_breaks log: only Dynamo's reasons list has it
    observation = observe(release, "data_branch")
    [site] = observation.sites
    assert (site.file, site.line, site.category) == ("data_branch.py", 7, "GB0170")
    assert ("log" in site.sources) == (release != "2.5.1")


def test_deepcopy_break_moves_into_the_standard_library_below_the_same_line():
    old = observe("2.5.1", "deepcopy_state").sites[0]
    new = observe("2.13.0", "deepcopy_state").sites[0]
    assert old.where() == "deepcopy_state.py:8" and old.call_site is None
    assert new.file == "copy.py" and new.function == "deepcopy"  # relative to the stdlib, never absolute
    assert new.call_site is not None and new.call_site.where() == "deepcopy_state.py:8"
    assert new.anchor.where() == old.anchor.where()


@pytest.mark.parametrize("release", RELEASES)
def test_module_that_falls_back_to_eager_entirely(release):
    observation = observe(release, "module_skip")
    assert observation.graphs == 0
    assert [(f.file, f.line) for f in observation.fallback_frames] == [("module_skip.py", 9)]
    assert [s.category for s in observation.sites] == ["GB0025"]


@pytest.mark.parametrize("release", RELEASES)
def test_fullgraph_run_records_the_first_break_as_error_with_its_location(release):
    observation = observe(release, "breaks")
    assert observation.fullgraph_status == "error"
    assert observation.fullgraph is not None and observation.fullgraph.location is not None
    assert observation.fullgraph.location.where() == "breaks.py:6"


def test_log_excerpt_has_no_pytorch_internal_traceback():
    for release in RELEASES:
        for site in observe(release, "breaks").sites:
            assert "Traceback (most recent call last)" not in site.excerpt
            assert "symbolic_convert.py" not in site.excerpt


def test_parse_2_6_format_and_suppressed_repeats():
    message = (
        "Graph break in user code at /w/repro.py:6\nReason: Unsupported: Tensor.item\n"
        'User code traceback:\n  File "/w/repro.py", line 6, in step\n    if x.item():\n'
    )
    raw = parse_graph_break(message)
    assert raw.reason == "Tensor.item" and [f.line for f in raw.frames] == [6]
    repeat = parse_graph_break(
        "Graph break (user stack suppressed due to duplicate graph break) in user code at /w/repro.py:6\n"
        "Graph Break Reason: Data-dependent branching\n  Explanation: x\n"
    )
    assert repeat.suppressed and repeat.frames[0].line == 6 and repeat.gb_type == "Data-dependent branching"


def test_parse_2_10_skip_and_wont_convert():
    message = (
        "Graph break: torch.compile cannot properly resume from this graph break, which results in a skip.\n"
        "torch.compile will skip tracing the frame f (/w/r.py line 3) and fall back to eager.\n"
        "The graph break occurred in the following user code:\n"
        '  File "/w/r.py", line 5, in f\n    torch._dynamo.graph_break()\n'
    )
    raw = parse_graph_break(
        message, "Unsupported", "Call to `torch._dynamo.graph_break()`\n  Explanation: User-inserted graph break."
    )
    assert raw.skip and raw.frames[-1].line == 5 and raw.gb_type == "Call to `torch._dynamo.graph_break()`"
    fallback = parse_wont_convert("WON'T CONVERT forward /w/r.py line 9 \ndue to: \nTraceback", "Unsupported: x")
    assert fallback is not None and (fallback.function, fallback.line) == ("forward", 9)


def test_recompile_and_frames():
    recompile = parse_recompile(
        "Recompiling function step in /w/r.py:3\n    triggered by the following guard failure(s):\n"
        "    - 0/0: tensor 'x' size mismatch at index 0. expected 16, actual 8"
    )
    assert recompile is not None and recompile.reasons == [
        "0/0: tensor 'x' size mismatch at index 0. expected 16, actual 8"
    ]
    frames = parse_frames('  File "a.py", line 3, in f\n    y = g(x)\n        ^^^^\n  File "b.py", line 9, in g\n')
    assert [(f.file, f.line, f.source) for f in frames] == [("a.py", 3, "y = g(x)"), ("b.py", 9, "")]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch_dynamo_resume_in_step_at_6", "step"),
        ("torch_dynamo_resume_in_torch_dynamo_resume_in_step_at_6_at_8", "step"),
        ("resume_in_forward", "forward"),
        ("<resume in f>", "f"),
        ("forward", "forward"),
    ],
)
def test_resume_names_are_normalized_for_every_release(name, expected):
    assert normalize_function(name) == expected


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("Tensor.item", "GB0124"),
        ("generic_jump TensorVariable()", "GB0170"),
        ("Data-dependent branching", "GB0170"),
        ("builtin: print [<class 'ConstantVariable'>] False", "GB0059"),
        ("call_function BuiltinVariable(print) [ConstantVariable(str)] {}", "GB0059"),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "GB0124"),
        ("Dynamo recompile limit exceeded", "GB0039"),  # a gb_type reworded across releases (was 'cache limit')
        ("Dynamo cache limit exceeded", "GB0039"),
    ],
)
def test_categories_survive_rewording(reason, category):
    assert categorize(reason)[0] == category


def test_unknown_legacy_reasons_get_a_stable_normalized_key_that_keeps_what_they_name():
    a = categorize("some new thing at 0x7f00 with 'x' 3")[0]
    b = categorize("some new thing at 0x7faa with 'x' 4")[0]
    assert a == b and a.startswith("legacy:")
    assert categorize("some new thing at 0x7f00 with 'y' 3")[0] != a  # another name, another key
    one = legacy_key("'skip function g in file /usr/lib/python3.11/contextlib.py'")
    other = legacy_key("'skip function h in file /opt/env/lib/python3.11/site-packages/m.py'")
    assert one == "legacy:skip function g in file contextlib.py" and one != other


@pytest.mark.parametrize(
    ("reason", "category", "subject"),
    [
        # 2.5.1's "skip function X in file Y" family is today's GB0007 (marked as skipped) ...
        (
            "'skip function manual_seed in file /env/lib/python3.11/site-packages/torch/random.py'",
            "GB0007",
            "manual_seed in random.py",
        ),
        ("Graph break due to unsupported builtin time.time. This function is either", "GB0007", "time.time"),
        ("Graph break due to unsupported builtin None.datetime.now. This function is", "GB0007", "datetime.now"),
        # ... except graph_break() itself, which has its own id
        (
            "'skip function graph_break in file /env/torch/_dynamo/decorators.py'",
            "GB0025",
            "graph_break in decorators.py",
        ),
        ("call torch._dynamo.disable() wrapped function <function f at 0x7f70d861b100>", "GB0098", "f"),
        ("builtin: repr [<class 'TensorVariable'>] False", "GB0059", "repr"),
    ],
)
def test_legacy_wording_maps_to_registry_ids_and_keeps_what_it_names(reason, category, subject):
    assert categorize(reason)[0] == category
    assert named_subject(reason) == subject


def _site(line: int, function: str, stack: list[tuple[int, str]], sources: list[str], category: str = "GB0124"):
    from casekit.model import Frame, Site

    frames = [Frame("repro.py", n, f) for n, f in stack]
    return Site("repro.py", line, function, "", category, "r", stack=frames, sources=sources)


def test_a_reasons_only_record_of_the_parent_call_line_merges_into_the_break_below_it():
    from casekit.observe.interpret import _merge_call_sites

    inner = _site(5, "g", [(14, "f"), (5, "g")], ["log"])
    parent = _site(14, "f", [(14, "f")], ["reasons"], category="GB0025")
    assert _merge_call_sites([inner, parent]) == [inner] and "reasons" in inner.sources
    # a logged break on the parent line is a break of its own
    logged = _site(14, "f", [(14, "f")], ["log"], category="GB0025")
    assert len(_merge_call_sites([inner, logged])) == 2


# Real runs (tests/fixtures/scripts, importing scripts/beside/stats_lib.py): a break inside a library function
# called from the script's line, and another break on that same line, once with the same id (.item() in both)
# and once for another cause (a logger call in the library)
LIBRARY_AND_CALLER = {
    "library_and_caller_item": [
        ("stats_lib.py:10", "mean_value", "GB0124"),
        ("library_and_caller_item.py:8", "step", "GB0124"),
    ],
    "library_logger_and_caller_item": [
        ("stats_lib.py:15", "scaled_loss", "GB0291"),
        ("library_logger_and_caller_item.py:8", "step", "GB0124"),
    ],
}


def _logged_innermost(release: str, name: str) -> list[tuple[str, int]]:
    """(file name, line) of the innermost user frame of every graph_breaks record of the compiled run."""
    raw = json.loads((FIXTURES / "probe" / release / f"{name}.json").read_text())
    places = []
    for record in raw["runs"]["compiled"]["records"]:
        if record.get("kind") == "graph_breaks":
            frames = parse_graph_break(record["message"], record.get("exc_type"), record.get("exc_message")).frames
            user = [f for f in frames if f.file.endswith(("stats_lib.py", f"{name}.py"))]
            if user:
                places.append((user[-1].file.rsplit("/", 1)[-1], user[-1].line))
    return places


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", sorted(LIBRARY_AND_CALLER))
def test_a_break_in_a_library_function_and_another_on_its_callers_line_are_two_sites(release, name):
    """`mean_value(y) + x.max().item()` breaks in the library function and again on the script's line: two
    breaks (three graphs a call), whether or not they share an id. The line is a call site on the library
    break's stack, so a rule that takes a logged break there for the library break seen from its caller
    (the same id was enough) made them one."""
    from casekit.observe.interpret import break_invariant

    # the records hold both: one whose innermost frame is the library's, one at the caller's line
    assert {("stats_lib.py", int(LIBRARY_AND_CALLER[name][0][0].split(":")[1])), (f"{name}.py", 8)} <= set(
        _logged_innermost(release, name)
    )
    observation = observe(release, name)
    assert [(s.where(), s.function, s.category) for s in observation.sites] == LIBRARY_AND_CALLER[name]
    library = observation.sites[0]
    assert library.call_site is not None and library.call_site.where() == f"{name}.py:8"
    assert observation.graphs == 6 and break_invariant(observation) is None


def test_a_callers_record_that_names_the_library_function_below_it_is_that_break():
    """The merge rule itself (no release recorded here logs it, see the two-site test above): a logged record at
    the caller's line whose reason names the library function that broke below it, as an inlining failure names
    it, is that break seen from its caller; one that only shares the id, or names another function, is not."""
    from casekit.model import Frame, Site, SiteKind
    from casekit.observe.interpret import _merge_call_sites

    def callee() -> Site:
        stack = [Frame("repro.py", 8, "step"), Frame("stats_lib.py", 15, "scaled_loss")]
        return Site("stats_lib.py", 15, "scaled_loss", "", "GB0291", "Logger", stack=stack, sources=["log"])

    def caller(reason: str, category: str, kind: SiteKind = SiteKind.BREAK) -> Site:
        return Site(
            "repro.py",
            8,
            "step",
            "",
            category,
            reason,
            stack=[Frame("repro.py", 8, "step")],
            kind=kind,
            sources=["log"],
        )

    below = callee()
    named = caller("SKIPPED INLINING <code object scaled_loss at 0x7f, file stats_lib.py, line 13>", "GB0008")
    assert _merge_call_sites([below, named]) == [below]
    assert len(_merge_call_sites([callee(), caller("'inline in skipfiles: scaled_loss'", "GB0008")])) == 1
    for other in (
        caller("Tensor.item", "GB0124"),  # another cause on the line
        caller("Logger not supported for non-export cases", "GB0291"),  # the same id only
        caller("'inline in skipfiles: scaled_loss_v2'", "GB0008"),  # another function
        caller("'inline in skipfiles: scaled_loss'", "GB0008", SiteKind.SKIP),  # the caller's frame fell back
    ):
        assert len(_merge_call_sites([callee(), other])) == 2, other.reason
    # a function of the script itself is no library: its break and a record naming it on the line stay two
    in_script = callee()
    in_script.file, in_script.stack[-1] = "repro.py", Frame("repro.py", 15, "scaled_loss")
    assert len(_merge_call_sites([in_script, caller("'inline in skipfiles: scaled_loss'", "GB0008")])) == 2


def _compile_reasons(release: str, name: str) -> list[tuple[str, list[tuple[str, int]]]]:
    """(reason, [(file name, line)]) of every compile reason of the compiled run, as the probe recorded them."""
    raw = json.loads((FIXTURES / "probe" / release / f"{name}.json").read_text())
    return [
        (r["reason"].splitlines()[0], [(f["file"].rsplit("/", 1)[-1], f["line"]) for f in r["stack"]])
        for r in raw["runs"]["compiled"]["compile_reasons"]
    ]


@pytest.mark.parametrize("release", RELEASES)
def test_a_library_break_2_5_1_logs_only_from_its_own_frame_is_one_site_with_its_callers_cut(release):
    """transformers 4.47.1 (recorded from a venv holding it beside each release's torch): the script's line
    `model.loss_function(...)` reads a property whose getter calls `logger.warning_once`. 2.5.1 cuts the
    script's frame on that line with the bare compile reason "step_unsupported" and logs the break only from
    the getter's own frame, with no caller on its stack; 2.13 logs it with the script's line above it. One
    break on both releases, so one site that persists (two sites read "persists + gone" on upgrade)."""
    from casekit.classify import pair_sites
    from casekit.model import SiteClass
    from casekit.observe.interpret import break_invariant

    name, line = "transformers_loss_property", 17
    reasons = _compile_reasons(release, name)
    assert ("step_unsupported", [(f"{name}.py", line)]) in reasons
    logged = _logged_stacks(release, name)
    assert [("modeling_utils.py", 5129)] in logged  # the getter's own frame, on both releases
    # only 2.13 logs it from the script's frame too
    from_the_script = [(f"{name}.py", line), ("modeling_utils.py", 5129)]
    assert any(stack[-2:] == from_the_script for stack in logged) == (release == "2.13.0")
    observation = observe(release, name)
    assert [(s.where(), s.function, s.category) for s in observation.sites] == [
        ("transformers/modeling_utils.py:5129", "loss_function", "GB0291")
    ]
    assert observation.graphs == 2 and break_invariant(observation) is None
    # reached from the script's line on both (2.5.1's from the cut's frames: its own record has no caller)
    [site] = observation.sites
    assert site.call_site is not None and (site.call_site.file.rsplit("/", 1)[-1], site.call_site.line) == (
        f"{name}.py",
        line,
    )
    [pairing] = pair_sites(observe("2.5.1", name).sites, observe("2.13.0", name).sites, set(), set())
    assert pairing.site_class is SiteClass.PERSISTS


def _logged_stacks(release: str, name: str) -> list[list[tuple[str, int]]]:
    """(file name, line) of the script's and library frames of each graph_breaks record of the compiled run."""
    raw = json.loads((FIXTURES / "probe" / release / f"{name}.json").read_text())
    stacks = []
    for record in raw["runs"]["compiled"]["records"]:
        if record.get("kind") == "graph_breaks":
            frames = parse_graph_break(record["message"], record.get("exc_type"), record.get("exc_message")).frames
            places = [(f.file.rsplit("/", 1)[-1], f.line) for f in frames]
            stacks.append([p for p in places if p[0] in (f"{name}.py", "modeling_utils.py")])
    return stacks


def test_a_bare_cut_is_the_break_of_the_function_its_line_names_that_ran_alone():
    """The rule itself: a compile-reason-only "step_unsupported" on a line is the logged break of another
    file's function that ran as a frame of its own, when the line names that function; not one the line
    does not name, nor one logged with a caller of its own, nor a cut that gave a cause of its own."""
    from casekit.model import Frame, Site
    from casekit.observe.interpret import _merge_call_sites

    def getter(function: str = "loss_function", stack_above: tuple[Frame, ...] = ()) -> Site:
        stack = [*stack_above, Frame("modeling_utils.py", 5129, function)]
        return Site("modeling_utils.py", 5129, function, "", "GB0291", "Logger", stack=stack, sources=["log"])

    def cut(reason: str = "step_unsupported", source: str = "loss = model.loss_function(logits, labels, 64)"):
        stack = [Frame("repro.py", 17, "step", source)]
        return Site("repro.py", 17, "step", source, f"legacy:{reason}", reason, stack=stack, sources=["reasons"])

    below = getter()
    assert _merge_call_sites([below, cut()]) == [below] and below.sources == ["log", "reasons"]
    assert len(_merge_call_sites([getter("other_function"), cut()])) == 2  # the line names another function
    elsewhere = (Frame("trainer.py", 40, "train_step"),)
    assert len(_merge_call_sites([getter(stack_above=elsewhere), cut()])) == 2  # it has a caller of its own
    assert len(_merge_call_sites([getter(), cut("generic_jump")])) == 2  # the cut gave its own cause


def test_two_records_of_one_break_on_one_line_are_one_site():
    # 2.13 logs both the key lambda's item() and the max() call it broke: one break, 2 graphs
    [site] = observe_corpus("2.13.0", "max_lambda_key").sites
    assert (site.line, site.function) == (6, "pick")


def test_the_2_13_skip_wording_is_a_skip():
    for release in RELEASES:
        [site] = observe_corpus(release, "graph_break_try_finally").sites
        assert site.kind == "skip", release


@pytest.mark.parametrize("release", RELEASES)
def test_break_invariant_holds_on_the_corpus_and_flags_what_does_not_add_up(release):
    from casekit.model import ScriptObservation, ScriptStatus
    from casekit.observe.interpret import break_invariant

    assert break_invariant(observe_corpus(release, "item_scalar")) is None
    assert break_invariant(observe_corpus(release, "nested_graph_break")) is None
    doubled = observe_corpus(release, "item_scalar")
    twice = ScriptObservation(ScriptStatus.OK, graphs=0, sites=doubled.sites)
    assert "no graph compiled" in (break_invariant(twice) or "")


def observe_corpus(release: str, name: str):
    root = FIXTURES.parent / "corpus" / name
    raw = json.loads((root / "probe" / f"{release}.json").read_text())
    return interpret(raw, raw["script"], "repro.py", (root / "repro.py").read_text())
