"""Classification as a specification: pure functions over plain data."""

from __future__ import annotations

import pytest

from casekit.bundle import sha256_text
from casekit.classify import classify_case, pair_sites
from casekit.model import (
    Case,
    FallbackFrame,
    Frame,
    Recompile,
    ReplayRecord,
    ScriptObservation,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    SiteKind,
    SiteVerdict,
    Verdict,
)

from .test_observe import observe

PRE, POST = ScriptRole.PRE, ScriptRole.POST


def site(
    line: int,
    category: str = "GB0124",
    file: str = "repro.py",
    function: str = "step",
    call_site: Frame | None = None,
    reason: str = "r",
) -> Site:
    return Site(
        file=file, line=line, function=function, source="", category=category, reason=reason, call_site=call_site
    )


def obs(*sites: Site, status: ScriptStatus = ScriptStatus.OK, **kwargs) -> ScriptObservation:
    return ScriptObservation(status=status, sites=list(sites), graphs=len(sites) + 1, **kwargs)


def case_with(
    pre: ScriptObservation, post: ScriptObservation | None = None, replays: list[ReplayRecord] | None = None
) -> Case:
    script = ScriptSource("repro.py", sha256_text(""), "")
    fixed = ScriptSource("fixed.py", sha256_text(""), "")
    observations = {PRE: pre}
    if post is not None:
        observations[POST] = post
    return Case(
        id="c",
        title="t",
        pre=script,
        post=fixed if post else None,
        observations=observations,
        rollback_notes="use fullgraph=False",
        replays=replays or [],
    )


def classes(pairings) -> list[str]:
    return [p.site_class.value for p in pairings]


def test_same_place_same_category_persists_even_if_reworded():
    [p] = pair_sites([site(6, reason="Tensor.item")], [site(6, reason="Unsupported Tensor.item() call")], set(), set())
    assert p.site_class is SiteClass.PERSISTS and p.note == "reason reworded"


def test_one_line_further_down_is_moved():
    assert classes(pair_sites([site(6)], [site(7)], set(), set())) == ["moved"]


def test_into_a_lambda_on_the_same_line_is_moved():
    [p] = pair_sites([site(6, function="step")], [site(6, function="<lambda>", file="repro.py")], set(), set())
    assert p.site_class is SiteClass.PERSISTS  # same file:line, same category: the frame name alone does not move it
    below = Frame("repro.py", 6, "step", "y = helper(x)")
    [p] = pair_sites([site(6)], [site(6, file="helpers.py", call_site=below)], set(), set())
    assert p.site_class is SiteClass.MOVED
    # without a shared script call site, the same id in another file is another break
    assert sorted(classes(pair_sites([site(6)], [site(6, file="helpers.py")], set(), set()))) == ["gone", "new"]


def test_into_a_library_below_the_same_script_line_is_moved_not_gone_plus_new():
    anchor = Frame("repro.py", 8, "snapshot", "saved = copy.deepcopy(state)")
    recorded = site(8, category="GB0179", function="snapshot")
    observed = site(153, category="GB4198-other", file="copy.py", function="deepcopy", call_site=anchor)
    [p] = pair_sites([recorded], [observed], set(), set())
    assert p.site_class is SiteClass.MOVED
    assert "below the same script line repro.py:8" in p.note


def test_gone_and_new():
    assert sorted(classes(pair_sites([site(6, "GB0124")], [site(9, "GB0059")], set(), set()))) == ["gone", "new"]


def test_reappeared_after_an_earlier_replay_saw_it_gone():
    previously_gone = {"repro.py:9|GB0059"}
    assert classes(pair_sites([], [site(9, "GB0059")], previously_gone, set())) == ["reappeared"]


def test_post_fix_break_of_a_fixed_category_reappears_and_breaks_the_fix():
    case = case_with(obs(site(6)), obs())
    result = classify_case(case, "t", {PRE: obs(site(6)), POST: obs(site(5, file="fixed.py"))})
    assert classes(result.scripts["post"].sites) == ["reappeared"]
    assert result.verdict == "fix_broken" and result.severity is Severity.ERROR
    assert result.rollback is not None and result.rollback.needed and result.rollback.notes == "use fullgraph=False"


def test_unchanged_case_is_info():
    case = case_with(obs(site(6)), obs())
    result = classify_case(case, "t", {PRE: obs(site(6)), POST: obs()})
    assert (result.verdict, result.severity, result.rollback) == ("unchanged", Severity.INFO, None)


def test_gone_upstream_says_the_workaround_may_be_removable():
    case = case_with(obs(site(6)), obs())
    result = classify_case(case, "t", {PRE: obs(), POST: obs()})
    assert result.verdict == "improved" and result.severity is Severity.INFO
    assert any("workaround may be removable" in n for n in result.scripts["pre"].notes)


def test_new_break_is_a_warning():
    case = case_with(obs(site(6)))
    result = classify_case(case, "t", {PRE: obs(site(6), site(9, "GB0059"))})
    assert (result.verdict, result.severity) == ("changed", Severity.WARN)


@pytest.mark.parametrize(
    "status",
    [
        ScriptStatus.COMPILE_ERROR,
        ScriptStatus.MISMATCH,
        ScriptStatus.EAGER_FAILED,
        ScriptStatus.TIMEOUT,
        ScriptStatus.CRASHED,
    ],
)
def test_functional_failures_are_errors(status):
    case = case_with(obs(site(6)))
    result = classify_case(case, "t", {PRE: obs(status=status)})
    assert result.severity is Severity.ERROR and result.verdict == "regressed"


def test_env_failed_is_an_error_and_its_sites_are_unobserved_never_gone():
    case = case_with(obs(site(6)))
    result = classify_case(case, "t", {PRE: ScriptObservation(status=ScriptStatus.ENV_FAILED, detail="no torch")})
    assert result.verdict == "env_failed"
    assert classes(result.scripts["pre"].sites) == ["unobserved"]
    assert result.scripts["pre"].cleared_fallbacks == []


def test_crash_fixed_upstream_and_persisting_crash():
    crashed = obs(status=ScriptStatus.COMPILE_ERROR)
    fixed = classify_case(case_with(crashed), "t", {PRE: obs()})
    assert fixed.verdict == "improved" and "fixed upstream" in fixed.scripts["pre"].notes[0]
    still = classify_case(case_with(crashed), "t", {PRE: obs(status=ScriptStatus.COMPILE_ERROR)})
    assert still.severity is Severity.INFO and "persisting compile_error" in still.scripts["pre"].notes[0]


def test_function_now_falling_back_to_eager_is_a_regression_not_fewer_breaks():
    case = case_with(obs(site(6)))
    now = obs(fallback_frames=[FallbackFrame("step", "repro.py", 3, "skip")])
    result = classify_case(case, "t", {PRE: now})
    assert result.severity is Severity.WARN
    assert any("falls back to eager entirely" in n for n in result.scripts["pre"].notes)


def test_fallback_cleared_into_an_ordinary_break_persists():
    skipped = site(6)
    skipped.kind = SiteKind.SKIP
    case = case_with(obs(skipped, fallback_frames=[FallbackFrame("step", "repro.py", 3)]))
    result = classify_case(case, "t", {PRE: obs(site(6))})
    [p] = result.scripts["pre"].sites
    assert p.site_class is SiteClass.PERSISTS and "fallback cleared" in p.note


def test_more_recompiles_warn():
    case = case_with(obs(recompiles=[]))
    result = classify_case(case, "t", {PRE: obs(recompiles=[Recompile("step", "repro.py", 3, ["size"])])})
    assert result.severity is Severity.WARN and "recompiles 0 -> 1" in result.reasons[0]


def test_history_marks_reappeared_across_replays():
    history = [
        ReplayRecord(
            at="x",
            target="t",
            torch="2.6",
            runner="venv",
            verdict=Verdict.IMPROVED,
            severity=Severity.INFO,
            statuses={PRE: "ok"},
            sites=[SiteVerdict(PRE, SiteClass.GONE, "repro.py:9", "GB0059")],
        )
    ]
    case = case_with(obs(site(6), site(9, "GB0059")), replays=history)
    # the case still records line 9 (capture), so it pairs as persists; a new site at a gone key reappears
    result = classify_case(case_with(obs(site(6)), replays=history), "t", {PRE: obs(site(6), site(9, "GB0059"))})
    assert classes(result.scripts["pre"].sites) == ["persists", "reappeared"]
    assert case.replays


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("breaks", ["persists", "persists"]),
        ("data_branch", ["persists"]),
        ("deepcopy_state", ["moved"]),
        ("module_skip", ["persists"]),
    ],
)
def test_real_runs_2_5_1_replayed_on_2_13_0(name, expected):
    recorded, observed = observe("2.5.1", name), observe("2.13.0", name)
    case = case_with(recorded)
    result = classify_case(case, "2.13.0", {PRE: observed})
    assert classes(result.scripts["pre"].sites) == expected
    assert result.scripts["pre"].new_fallbacks == []


@pytest.mark.parametrize("name", ["breaks", "data_branch", "deepcopy_state", "module_skip"])
def test_real_runs_2_13_0_replayed_on_2_5_1(name):
    result = classify_case(case_with(observe("2.13.0", name)), "2.5.1", {PRE: observe("2.5.1", name)})
    assert {p.site_class for p in result.scripts["pre"].sites} <= {SiteClass.PERSISTS, SiteClass.MOVED}


def test_an_accepted_post_fix_break_that_moves_warns_but_the_fix_still_holds():
    accepted = site(21, "GB0098", file="fixed.py")
    case = case_with(obs(site(6)), obs(accepted))
    result = classify_case(case, "t", {PRE: obs(site(6)), POST: obs(site(22, "GB0098", file="fixed.py"))})
    assert classes(result.scripts["post"].sites) == ["moved"]
    assert (result.verdict, result.severity, result.rollback) == ("changed", Severity.WARN, None)


# ---- issue 10: identity that survives rewording, re-registration and deeper tracing


def frame(line: int, function: str = "step", file: str = "repro.py") -> Frame:
    return Frame(file, line, function)


def deep(line: int, category: str, function: str, stack: list[Frame], reason: str = "r", **kw) -> Site:
    s = site(line, category, function=function, reason=reason, **kw)
    s.stack = stack
    return s


def test_same_place_reworded_into_another_id_persists_with_the_change_named():
    recorded = site(8, "GB0059", reason="builtin: repr [TensorVariable] False")
    observed = site(8, "GB0569", reason="repr() on tensor")
    [p] = pair_sites([recorded], [observed], set(), set())
    assert p.site_class is SiteClass.PERSISTS and p.note.startswith("reason changed: GB0059")


def test_a_lambda_called_on_the_same_line_is_a_deeper_frame_moved_not_gone_plus_new():
    recorded = deep(6, "GB0059", "best", [frame(6, "best")], reason="builtin: sorted")
    observed = deep(6, "GB0124", "<lambda>", [frame(6, "best"), frame(6, "<lambda>")], reason="Tensor.item")
    for a, b in ((recorded, observed), (observed, recorded)):
        [p] = pair_sites([a], [b], set(), set())
        assert p.site_class is SiteClass.MOVED and "on the same script line" in p.note
    assert "traced deeper" in pair_sites([recorded], [observed], set(), set())[0].note


def test_deeper_in_a_script_helper_below_the_same_call_line_is_moved():
    anchor = frame(12, "forward")
    recorded = site(12, "GB0059", function="forward")
    observed = site(30, "GB0124", function="helper", call_site=anchor)
    [p] = pair_sites([recorded], [observed], set(), set())
    assert p.site_class is SiteClass.MOVED and "deeper below the same script line repro.py:12" in p.note


def test_an_operation_let_through_that_breaks_on_its_use_later_in_the_function_is_moved():
    produced = site(6, "GB0033", reason="Data dependent operator")
    used = site(10, "legacy:Could not guard on data-dependent expression u0 < N", reason="Could not guard on ...")
    for a, b in ((produced, used), (used, produced)):
        [p] = pair_sites([a], [b], set(), set())
        assert p.site_class is SiteClass.MOVED and "same function" in p.note


def test_unrelated_breaks_near_each_other_stay_gone_plus_new():
    # an item() break fixed and a print break new, three lines apart: not one break reached later
    assert sorted(classes(pair_sites([site(6, "GB0124")], [site(9, "GB0059")], set(), set()))) == ["gone", "new"]
    # a produced value and two later uses: not each other's only candidates, so no guess
    uses = [site(9, "GB0170", reason="generic_jump"), site(10, "GB0170", reason="generic_jump")]
    assert sorted(classes(pair_sites([site(6, "GB0124")], uses, set(), set()))) == ["gone", "new", "new"]


def test_never_pairs_across_functions_without_a_shared_script_line():
    recorded = site(13, "GB0007", function="encode")
    observed = site(18, "GB0007", function="jitter")
    assert sorted(classes(pair_sites([recorded], [observed], set(), set()))) == ["gone", "new"]


def test_two_different_skipped_functions_are_two_breaks():
    time_site = site(9, "GB0007", reason="Graph break due to unsupported builtin time.time. This function")
    now_site = site(11, "GB0007", reason="Graph break due to unsupported builtin None.datetime.now. This function")
    # time.time gone and datetime.now new in one function: same id, but they name different things
    assert sorted(classes(pair_sites([time_site], [now_site], set(), set()))) == ["gone", "new"]
    same = site(12, "GB0007", reason="Graph break due to unsupported builtin time.time. This function")
    assert classes(pair_sites([time_site], [same], set(), set())) == ["moved"]


def test_two_records_on_one_line_pair_straight_and_no_fallback_is_claimed_cleared():
    brk = site(14, "GB0066", reason="Graph break under GenericContextWrappingVariable")
    skipped = site(14, "GB0059", reason="builtin: print")
    skipped.kind = SiteKind.SKIP
    new_brk = site(14, "GB0066", reason="reworded context manager break")
    new_skipped = site(14, "GB0059", reason="Failed to trace builtin operator")
    new_skipped.kind = SiteKind.SKIP
    pairs = pair_sites([brk, skipped], [new_skipped, new_brk], set(), set())
    assert {(p.recorded.kind, p.observed.kind) for p in pairs} == {("break", "break"), ("skip", "skip")}
    # a frame that falls back to eager on both sides: reworded, not "fallback cleared"
    fallback = FallbackFrame("step", "repro.py", 3)
    now = site(14, "GB0025")
    case = case_with(obs(skipped, fallback_frames=[fallback]))
    result = classify_case(case, "t", {PRE: obs(now, fallback_frames=[fallback])})
    [p] = result.scripts["pre"].sites
    assert p.site_class is SiteClass.PERSISTS and "fallback cleared" not in p.note
    assert not result.scripts["pre"].cleared_fallbacks


def test_eager_failure_leaves_sites_unobserved_never_gone_and_clears_no_fallback():
    case = case_with(obs(site(6), site(9, "GB0059"), fallback_frames=[FallbackFrame("step", "repro.py", 3)]), obs())
    failed = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail="eager baseline: ImportError: no module x")
    result = classify_case(case, "venv:torch-2.5.1", {PRE: failed})
    pre = result.scripts["pre"]
    assert classes(pre.sites) == ["unobserved", "unobserved"]
    assert pre.cleared_fallbacks == [] and not any("removable" in n or "cleared" in n for n in pre.notes)
    assert result.verdict == "regressed" and any(
        "nothing ran: eager baseline: ImportError" in r for r in result.reasons
    )


def test_a_pinned_library_refusing_the_target_torch_is_named_with_what_to_do():
    from casekit.observe.cause import not_run_cause

    case = case_with(obs(site(6)), obs())
    case.environment = {"packages": {"transformers": "5.24.0"}}
    message = (
        "ImportError: AutoModel requires PyTorch >= 2.6, but PyTorch was not found or an older version is installed."
    )
    failed = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail=f"eager baseline: {message}")
    result = classify_case(case, "venv:torch-2.5.1", {PRE: failed})
    assert (result.verdict, result.severity) == (Verdict.ENV_FAILED, Severity.ERROR)
    not_run = result.scripts[PRE].not_run
    assert not_run is not None and not_run.pinned == "transformers"  # the fact, as a field
    [line] = [r for r in result.reasons if "nothing ran" in r]
    assert line == f"pre: {not_run.line}" and not_run.line in result.scripts[PRE].notes
    assert "transformers 5.24.0 (pinned) requires torch>=2.6 and refuses torch 2.5.1" in line
    assert "--no-pin-packages" in line and "a transformers version that supports torch 2.5.1" in line
    # the floor from the library's metadata when the error does not state it
    quiet = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail="eager baseline: ImportError: transformers")
    metadata = {"transformers": ['torch>=2.6; extra == "torch"', "numpy>=1.17"]}
    cause = not_run_cause(quiet, {"transformers": "5.24.0"}, "venv:torch-2.5.1", lambda d, v: metadata.get(d))
    assert "requires torch>=2.6" in cause.line and cause.pinned == "transformers"
    # the library not installed at all (--no-pin-packages): no floor to blame
    missing = ScriptObservation(
        status=ScriptStatus.EAGER_FAILED, detail="eager baseline: ModuleNotFoundError: No module named 'transformers'"
    )
    cause = not_run_cause(missing, {"transformers": "5.24.0"}, "venv:torch-2.5.1", lambda d, v: metadata.get(d))
    assert cause.line == "nothing ran: eager baseline: ModuleNotFoundError: No module named 'transformers'"
    assert cause.pinned is None
    # no pinned library to blame: the cause as it is
    plain = not_run_cause(quiet, {}, "venv:torch-2.5.1", lambda d, v: None)
    assert (plain.line, plain.pinned) == ("nothing ran: eager baseline: ImportError: transformers", None)


def test_the_environment_is_blamed_from_the_pinned_field_never_from_the_note_text():
    """A script's own error that says "(pinned)" is still the script's regression: only a pinned library
    whose torch floor is above the target's makes it the environment's (env_failed)."""
    case = case_with(obs(site(6)), obs())
    detail = "eager baseline: RuntimeError: config value (pinned) requires a newer torch"
    failed = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail=detail)
    result = classify_case(case, "venv:torch-2.5.1", {PRE: failed})
    not_run = result.scripts[PRE].not_run
    assert not_run is not None and not_run.pinned is None and "(pinned)" in not_run.line
    assert result.verdict is Verdict.REGRESSED and result.severity is Severity.ERROR
    # the post-fix failing so, with the pre-fix running in the same environment, is a broken fix
    both = classify_case(case, "venv:torch-2.5.1", {PRE: obs(site(6)), POST: failed})
    assert both.verdict is Verdict.FIX_BROKEN and both.rollback is not None


def test_a_crash_midway_leaves_what_was_not_reached_unobserved():
    case = case_with(obs(site(6), site(20, "GB0059")))
    crashed = obs(site(6), status=ScriptStatus.COMPILE_ERROR)
    crashed.detail = "compiled run: AssertionError: Guard check failed"
    pre = classify_case(case, "t", {PRE: crashed}).scripts["pre"]
    assert classes(pre.sites) == ["persists", "unobserved"]


def test_gone_advice_only_for_a_real_gone():
    case = case_with(obs(site(6)), obs())
    moved = classify_case(case, "t", {PRE: obs(site(7, "GB0124")), POST: obs()})
    assert not any("removable" in n for n in moved.scripts["pre"].notes)
    failed = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail="eager baseline: boom")
    assert not any("removable" in n for n in classify_case(case, "t", {PRE: failed}).scripts["pre"].notes)


def test_same_break_by_place_for_import():
    from casekit.classify import same_break

    anchor = frame(8, "snapshot")
    assert same_break(site(8, "GB0179"), site(8, "GB0124"))  # same place, another id
    assert same_break(site(8, "GB0179"), site(153, "GB4198", file="copy.py", call_site=anchor))
    assert not same_break(site(8, "GB0179"), site(9, "GB0179"))  # a move needs the whole pairing


def test_a_fix_that_no_longer_runs_while_the_pre_fix_does_is_a_broken_fix():
    """The torch.cond fix of 2.5.1 fails even eagerly on 2.13: the environment is fine (the pre-fix ran),
    so the fix itself no longer holds -> fix_broken with rollback, not a plain regression."""
    case = case_with(obs(site(6)), obs())
    failed = ScriptObservation(status=ScriptStatus.EAGER_FAILED, detail="eager baseline: RuntimeError: cond")
    result = classify_case(case, "venv:torch-2.13.0", {PRE: obs(site(6)), POST: failed})
    assert result.verdict == "fix_broken" and result.rollback is not None and result.rollback.needed
    # when the pre-fix could not run either, the environment is at fault: no claim about the fix
    both = classify_case(case, "venv:torch-2.13.0", {PRE: failed, POST: failed})
    assert both.verdict == "regressed" and both.rollback is None
