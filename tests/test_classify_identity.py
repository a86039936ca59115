"""Break identity on the next upgrade (issue 20): library statements compared by what they are, breaks
reached through the recorded script line, def-use moves, one fallback note per function.

Each rule is specified on plain sites, then checked on the real corpus records (torch 2.5.1, 2.13.0 and
2.14.1, tests/corpus/) beside a control that shows what the rule changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekit.bundle import sha256_text
from casekit.classify import classify_case, pair_sites
from casekit.model import (
    Case,
    FallbackFrame,
    Frame,
    ScriptObservation,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Site,
    SiteClass,
    SiteKind,
)
from casekit.observe import interpret
from casekit.observe.interpret import break_invariant
from casekit.observe.reasons import categorize

CORPUS = Path(__file__).resolve().parent / "corpus"
RELEASES = ("2.5.1", "2.13.0", "2.14.1")
PRE = ScriptRole.PRE
SCRIPT_LINE = Frame("repro.py", 6, "log_prob", "d = torch.distributions.Normal(loc, scale, validate_args=True)")


def library_site(line: int, source: str, category: str = "GB0007", function: str = "__init__", via: str = "") -> Site:
    """A break in torch/distributions/distribution.py below repro.py:6 (through normal.py's __init__ when `via`)."""
    frames = [SCRIPT_LINE]
    if via:
        frames.append(Frame("torch/distributions/normal.py", 59, via, "super().__init__(...)"))
    inner = Frame("torch/distributions/distribution.py", line, function, source)
    return Site(
        file=inner.file,
        line=line,
        function=function,
        source=source,
        category=category,
        reason="r",
        call_site=SCRIPT_LINE,
        stack=[*frames, inner],
    )


def only(pairings):
    [pairing] = pairings
    return pairing


# --- 1. a library line number is evidence only -------------------------------------------------


def test_a_library_statement_that_only_renumbered_persists():
    recorded = library_site(62, "if constraints.is_dependent(constraint):", via="__init__")
    observed = library_site(68, "if (constraints.is_dependent(constraint)):  # spacing, parentheses", via="__init__")
    pairing = only(pair_sites([recorded], [observed], set(), set()))
    assert pairing.site_class is SiteClass.PERSISTS
    assert "library line renumbered: torch/distributions/distribution.py:62 -> :68" in pairing.note


def test_a_frame_the_printed_stack_dropped_is_not_another_path():
    # 2.13 prints a polyfill where 2.5.1 printed normal.py's __init__: the shorter path is a subsequence
    recorded = library_site(62, "if constraints.is_dependent(constraint):", via="__init__")
    observed = library_site(68, "if constraints.is_dependent(constraint):")
    assert only(pair_sites([recorded], [observed], set(), set())).site_class is SiteClass.PERSISTS


def test_an_in_place_rewrite_with_the_same_cause_persists_with_a_note_and_another_cause_moves():
    recorded = library_site(315, "if not valid.all():", "GB0170", "_validate_sample")
    rewritten = library_site(323, "if not torch._is_all_true(valid):", "GB0170", "_validate_sample")
    pairing = only(pair_sites([recorded], [rewritten], set(), set()))
    assert pairing.site_class is SiteClass.PERSISTS
    assert "rewritten in place" in pairing.note and "`if not valid.all():`" in pairing.note
    other_cause = library_site(323, "if not torch._is_all_true(valid):", "GB0124", "_validate_sample")
    assert only(pair_sites([recorded], [other_cause], set(), set())).site_class is SiteClass.MOVED


def test_same_text_in_another_library_function_or_below_another_script_line_is_not_the_same_statement():
    recorded = library_site(62, "if constraints.is_dependent(constraint):")
    elsewhere = library_site(140, "if constraints.is_dependent(constraint):", function="expand")
    assert only(pair_sites([recorded], [elsewhere], set(), set())).site_class is SiteClass.MOVED
    other_line = library_site(68, "if constraints.is_dependent(constraint):")
    other_line.call_site = Frame("repro.py", 9, "log_prob", "other()")
    other_line.stack[0] = other_line.call_site
    # reached from another script line: at most a move within the same function, never the same statement
    assert classes(pair_sites([recorded], [other_line], set(), set())) == ["moved"]


def classes(pairings) -> list[str]:
    return [p.site_class.value for p in pairings]


# --- 2. reached through the recorded script line ------------------------------------------------


def script_site(line: int, function: str, source: str, category: str, stack: list[Frame] | None = None) -> Site:
    frame = Frame("repro.py", line, function, source)
    return Site("repro.py", line, function, source, category, "r", stack=[*(stack or []), frame])


WITH_LINE = Frame("repro.py", 17, "forward", 'with span("forward"):')
ENTER = Frame("contextlib.py", 111, "__init__", "self.gen = func(*args, **kwds)")


def test_a_break_that_moved_into_a_context_manager_helper_is_moved_deeper_with_its_path():
    recorded = script_site(17, "forward", WITH_LINE.source, "GB0007")
    observed = script_site(9, "span", "start = time.perf_counter()", "GB0007", stack=[WITH_LINE, ENTER])
    pairing = only(pair_sites([recorded], [observed], set(), set()))
    assert pairing.site_class is SiteClass.MOVED
    assert "traced deeper through the same script line repro.py:17" in pairing.note
    assert "forward (repro.py:17) -> __init__ (contextlib.py:111) -> span (repro.py:9)" in pairing.note
    back = only(pair_sites([observed], [recorded], set(), set()))
    assert back.site_class is SiteClass.MOVED and "less deep" in back.note


def test_a_helper_break_whose_stack_does_not_run_through_the_recorded_line_is_gone_and_new():
    recorded = script_site(17, "forward", WITH_LINE.source, "GB0007")
    elsewhere = Frame("repro.py", 19, "forward", "y = helper(y)")
    observed = script_site(9, "span", "start = time.perf_counter()", "GB0007", stack=[elsewhere, ENTER])
    assert classes(pair_sites([recorded], [observed], set(), set())) == ["gone", "new"]


def test_a_break_that_still_breaks_on_the_line_keeps_it_and_the_helper_break_is_new():
    recorded = script_site(17, "forward", WITH_LINE.source, "GB0007")
    still = script_site(17, "forward", WITH_LINE.source, "GB0007")
    helper = script_site(9, "span", "start = time.perf_counter()", "GB0007", stack=[WITH_LINE, ENTER])
    assert classes(pair_sites([recorded], [still, helper], set(), set())) == ["persists", "new"]


# --- 3. def-use: the break moves to the line that uses the value ----------------------------------


def test_a_break_that_moves_to_the_use_of_the_value_the_recorded_line_produced_is_moved():
    recorded = script_site(6, "aligned", "p = x.data_ptr()", "legacy:Tensor.data_ptr")
    observed = script_site(7, "aligned", "if (p % 16) == 0:", "GB0088")
    observed.kind = SiteKind.SKIP
    pairing = only(pair_sites([recorded], [observed], set(), set()))
    assert pairing.site_class is SiteClass.MOVED and "1 line(s) away in the same function" in pairing.note
    # control: the next line does not read p: no def-use link, two unrelated breaks
    unrelated = script_site(7, "aligned", "if (x.numel() % 16) == 0:", "GB0088")
    assert classes(pair_sites([recorded], [unrelated], set(), set())) == ["gone", "new"]


# --- fallback notes: once per function -----------------------------------------------------------


def case_of(recorded: ScriptObservation, post: bool = True) -> Case:
    script = ScriptSource("repro.py", sha256_text(""), "")
    fixed = ScriptSource("fixed.py", sha256_text(""), "") if post else None
    return Case(id="c", title="t", pre=script, post=fixed, observations={PRE: recorded})


def test_one_function_named_at_two_lines_never_gets_both_fallback_notes():
    # 2.5.1 knows forward's fallback by its skip-type break's line (17), 2.13 by where it starts (14)
    recorded = ScriptObservation(ScriptStatus.OK, fallback_frames=[FallbackFrame("forward", "repro.py", 17)])
    observed = ScriptObservation(ScriptStatus.OK, fallback_frames=[FallbackFrame("forward", "repro.py", 14)])
    notes = classify_case(case_of(recorded), "t", {PRE: observed}).scripts[PRE].notes
    assert not [n for n in notes if "forward" in n and "falls back" in n], notes


def test_removable_only_when_the_break_is_gone_and_nothing_new_falls_back():
    recorded = ScriptObservation(ScriptStatus.OK, graphs=2, sites=[script_site(6, "step", "x.item()", "GB0124")])
    clean = ScriptObservation(ScriptStatus.OK, graphs=1)
    notes = classify_case(case_of(recorded), "t", {PRE: clean}).scripts[PRE].notes
    assert any("workaround may be removable" in n for n in notes)
    worse = ScriptObservation(ScriptStatus.OK, fallback_frames=[FallbackFrame("step", "repro.py", 4)])
    notes = classify_case(case_of(recorded), "t", {PRE: worse}).scripts[PRE].notes
    assert not any("removable" in n for n in notes) and any("now falls back" in n for n in notes)


# --- the real corpus records ---------------------------------------------------------------------


def corpus(case: str, release: str) -> tuple[ScriptObservation, str]:
    source = (CORPUS / case / "repro.py").read_text()
    raw = json.loads((CORPUS / case / "probe" / f"{release}.json").read_text())
    return interpret(raw, raw["script"], "repro.py", source), source


def replay(case: str, captured: str, replayed: str):
    recorded, source = corpus(case, captured)
    observed, _ = corpus(case, replayed)
    bundle = Case(
        id=case,
        title=case,
        pre=ScriptSource("repro.py", sha256_text(source), source),
        post=ScriptSource("fixed.py", sha256_text(""), ""),
        observations={PRE: recorded},
    )
    return classify_case(bundle, replayed, {PRE: observed}).scripts[PRE]


@pytest.mark.parametrize("captured, replayed", [("2.5.1", "2.13.0"), ("2.13.0", "2.5.1"), ("2.5.1", "2.14.1")])
def test_the_context_manager_case_reads_moved_with_notes_that_agree(captured, replayed):
    result = replay("contextmanager_span_helper", captured, replayed)
    assert [p.site_class for p in result.sites] == [SiteClass.MOVED]
    # one note for forward: 2.5.1 compiles it up to the with line and only its resume function falls back,
    # 2.13+ fall back on all of it (2.5.1 names the fallback at line 17, 2.13 where forward starts, 14)
    [forward] = [n for n in result.notes if n.startswith("forward ")]
    if captured == "2.5.1":
        assert forward == (
            "forward (repro.py:14) now falls back to eager entirely (before, only the code from line 17 on ran eagerly)"
        )
        assert [f.function for f in result.new_fallbacks] == ["forward"]
    else:
        assert forward.startswith("forward compiles again up to line 17")
    assert not any("removable" in n for n in result.notes)


def test_the_resume_function_that_skips_on_the_breaking_line_is_one_break_not_two():
    observation, _ = corpus("contextmanager_span_helper", "2.5.1")
    assert [(s.where(), s.kind) for s in observation.sites] == [("repro.py:17", SiteKind.BREAK)]


@pytest.mark.parametrize("release", ["2.13.0", "2.14.1"])
def test_dynamos_own_stack_fills_in_frames_the_printed_traceback_lost(release):
    observation, _ = corpus("distributions_validate", release)
    init, validate = observation.sites
    # the print swaps normal.py's __init__ for a polyfill; compile reasons keep it
    assert [f.file for f in init.stack] == [
        "repro.py",
        "torch/distributions/normal.py",
        "torch/distributions/distribution.py",
    ]
    # the print of the break in the resume function starts at the module line: the script line is 7
    assert validate.call_site is not None and validate.call_site.where() == "repro.py:7"
    assert all(f.function != "<module>" for s in observation.sites for f in s.stack)


@pytest.mark.parametrize("release", RELEASES)
def test_genuinely_distinct_breaks_at_the_first_statements_of_frames_are_not_counted_twice(release):
    observation, source = corpus("distributions_validate", release)
    breaks = [s for s in observation.sites if s.kind is SiteKind.BREAK]
    # control: more break sites than graphs and fallbacks, which the note used to read as a double count
    assert len(breaks) > observation.graphs + len(observation.fallback_frames)
    assert break_invariant(observation, source) is None
    assert "counted twice" in (break_invariant(observation) or "")  # without the source it cannot tell


def test_two_sites_on_one_ordinary_line_still_read_as_counted_twice():
    first = script_site(8, "step", "y = helper(x)", "GB0124")
    second = script_site(8, "step", "y = helper(x)", "GB0059")
    observation = ScriptObservation(ScriptStatus.OK, graphs=1, sites=[first, second])
    source = "def step(x):\n    x = x + 1\n    x = x * 2\n    return x\n\n\n\ny = helper(x)\n"
    assert "counted twice" in (break_invariant(observation, source) or "")


def test_inline_in_skipfiles_is_gb0008_and_calling_a_skipped_function_stays_gb0007():
    observation, _ = corpus("functools_cached_property", "2.5.1")
    [cached] = observation.sites
    assert cached.reason.startswith("'inline in skipfiles: cached_property.__get__")
    assert cached.category == "GB0008"
    assert categorize("Attempted to inline function marked as skipped") == ("GB0008", "GB0008")
    assert categorize("'skip function span in file /usr/lib/python3.11/contextlib.py'")[0] == "GB0007"


def test_no_function_is_ever_both_cleared_and_newly_falling_back_over_random_histories():
    import random

    rng = random.Random(20)
    pool = [FallbackFrame(name, "repro.py", line) for name in ("forward", "span", "step") for line in (4, 9, 14, 17)]
    for _ in range(500):
        before = rng.sample(pool, rng.randint(0, 4))
        after = rng.sample(pool, rng.randint(0, 4))
        result = classify_case(
            case_of(ScriptObservation(ScriptStatus.OK, fallback_frames=before)),
            "t",
            {PRE: ScriptObservation(ScriptStatus.OK, fallback_frames=after)},
        ).scripts[PRE]
        cleared = {f.function for f in result.cleared_fallbacks}
        new = {f.function for f in result.new_fallbacks}
        assert not cleared & new, (before, after)
        notes = result.notes
        for function in cleared | new:
            said = [n for n in notes if n.startswith(f"{function} ")]
            assert not (any("no longer" in n for n in said) and any("now falls back" in n for n in said)), notes
