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
    ScriptSource,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    SiteVerdict,
)

from .test_observe import observe


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
    observations = {"pre": pre}
    if post is not None:
        observations["post"] = post
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
    result = classify_case(case, "t", {"pre": obs(site(6)), "post": obs(site(5, file="fixed.py"))})
    assert classes(result.scripts["post"].sites) == ["reappeared"]
    assert result.verdict == "fix_broken" and result.severity is Severity.ERROR
    assert result.rollback is not None and result.rollback.needed and result.rollback.notes == "use fullgraph=False"


def test_unchanged_case_is_info():
    case = case_with(obs(site(6)), obs())
    result = classify_case(case, "t", {"pre": obs(site(6)), "post": obs()})
    assert (result.verdict, result.severity, result.rollback) == ("unchanged", Severity.INFO, None)


def test_gone_upstream_says_the_workaround_may_be_removable():
    case = case_with(obs(site(6)), obs())
    result = classify_case(case, "t", {"pre": obs(), "post": obs()})
    assert result.verdict == "improved" and result.severity is Severity.INFO
    assert any("workaround may be removable" in n for n in result.scripts["pre"].notes)


def test_new_break_is_a_warning():
    case = case_with(obs(site(6)))
    result = classify_case(case, "t", {"pre": obs(site(6), site(9, "GB0059"))})
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
    result = classify_case(case, "t", {"pre": obs(status=status)})
    assert result.severity is Severity.ERROR and result.verdict == "regressed"


def test_env_failed_is_an_error_and_its_sites_are_unobserved_never_gone():
    case = case_with(obs(site(6)))
    result = classify_case(case, "t", {"pre": ScriptObservation(status=ScriptStatus.ENV_FAILED, detail="no torch")})
    assert result.verdict == "env_failed"
    assert classes(result.scripts["pre"].sites) == ["unobserved"]
    assert result.scripts["pre"].cleared_fallbacks == []


def test_crash_fixed_upstream_and_persisting_crash():
    crashed = obs(status=ScriptStatus.COMPILE_ERROR)
    fixed = classify_case(case_with(crashed), "t", {"pre": obs()})
    assert fixed.verdict == "improved" and "fixed upstream" in fixed.scripts["pre"].notes[0]
    still = classify_case(case_with(crashed), "t", {"pre": obs(status=ScriptStatus.COMPILE_ERROR)})
    assert still.severity is Severity.INFO and "persisting compile_error" in still.scripts["pre"].notes[0]


def test_function_now_falling_back_to_eager_is_a_regression_not_fewer_breaks():
    case = case_with(obs(site(6)))
    now = obs(fallback_frames=[FallbackFrame("step", "repro.py", 3, "skip")])
    result = classify_case(case, "t", {"pre": now})
    assert result.severity is Severity.WARN
    assert any("falls back to eager entirely" in n for n in result.scripts["pre"].notes)


def test_fallback_cleared_into_an_ordinary_break_persists():
    skipped = site(6)
    skipped.kind = "skip"
    case = case_with(obs(skipped, fallback_frames=[FallbackFrame("step", "repro.py", 3)]))
    result = classify_case(case, "t", {"pre": obs(site(6))})
    [p] = result.scripts["pre"].sites
    assert p.site_class is SiteClass.PERSISTS and "fallback cleared" in p.note


def test_more_recompiles_warn():
    case = case_with(obs(recompiles=[]))
    result = classify_case(case, "t", {"pre": obs(recompiles=[Recompile("step", "repro.py", 3, ["size"])])})
    assert result.severity is Severity.WARN and "recompiles 0 -> 1" in result.reasons[0]


def test_history_marks_reappeared_across_replays():
    history = [
        ReplayRecord(
            at="x",
            target="t",
            torch="2.6",
            runner="venv",
            verdict="improved",
            severity=Severity.INFO,
            statuses={"pre": "ok"},
            sites=[SiteVerdict("pre", SiteClass.GONE, "repro.py:9", "GB0059")],
        )
    ]
    case = case_with(obs(site(6), site(9, "GB0059")), replays=history)
    # the case still records line 9 (capture), so it pairs as persists; a new site at a gone key reappears
    result = classify_case(case_with(obs(site(6)), replays=history), "t", {"pre": obs(site(6), site(9, "GB0059"))})
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
    result = classify_case(case, "2.13.0", {"pre": observed})
    assert classes(result.scripts["pre"].sites) == expected
    assert result.scripts["pre"].new_fallbacks == []


@pytest.mark.parametrize("name", ["breaks", "data_branch", "deepcopy_state", "module_skip"])
def test_real_runs_2_13_0_replayed_on_2_5_1(name):
    result = classify_case(case_with(observe("2.13.0", name)), "2.5.1", {"pre": observe("2.5.1", name)})
    assert {p.site_class for p in result.scripts["pre"].sites} <= {SiteClass.PERSISTS, SiteClass.MOVED}


def test_an_accepted_post_fix_break_that_moves_warns_but_the_fix_still_holds():
    accepted = site(21, "GB0098", file="fixed.py")
    case = case_with(obs(site(6)), obs(accepted))
    result = classify_case(case, "t", {"pre": obs(site(6)), "post": obs(site(22, "GB0098", file="fixed.py"))})
    assert classes(result.scripts["post"].sites) == ["moved"]
    assert (result.verdict, result.severity, result.rollback) == ("changed", Severity.WARN, None)
