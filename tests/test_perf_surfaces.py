"""Where a timing shows: the bundle's history and capture record, show, the HTML report and its timeline, the
Markdown step summary, JUnit, and the bisection's perf rule. Pure: the timings are built here as
`replay --perf` writes them (the live runs are tests/test_perf_surfaces_live.py).

Other people's timings are untrusted text (a shared archive, a CI job's document): each attack test beside
a control that shows the attack works with the protection bypassed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from casekit.archive.store import Archive
from casekit.bisect.engine import Evaluated
from casekit.bisect.perf import SLOWER, PerfRule, _preflight
from casekit.bisect.plan import BisectRequest, perf_rule_for, predicate_for
from casekit.bisect.releases import ReleaseBisect
from casekit.bisect.search import UNKNOWN
from casekit.bundle import case_to_toml, parse_case
from casekit.errors import BisectError, BundleError
from casekit.model import (
    Case,
    PerfAxis,
    PerfAxisResult,
    PerfComparison,
    PerfFigures,
    PerfRecord,
    PerfStructure,
    PerfVerdict,
    ScriptRole,
    Severity,
    Spread,
)
from casekit.outcome import FailOn
from casekit.replay.document import ReplayDocument, read_replay_document
from casekit.replay.run import TargetRun, record_perf
from casekit.report import html as report_html
from casekit.report.formats import get_format
from casekit.report.pictures import timeline_from_case, timeline_svg
from casekit.report.summary import summarize
from casekit.report.text import case_summary
from casekit.runners.interface import TargetSpec
from tests.test_report_formats import ARCHIVE, RESULTS, starter

BASELINE = "python:…/env-1.0/bin/python"
STEADY_WHY = "+182.0% (p=0.000667), past 5%"
HOSTILE_MD = "[pixel](http://tracker.example/p) ![x](http://tracker.example/i.png) <img src=x> @team #12"
HOSTILE_HTML = '<script>alert("perf")</script>'


def figures(target: str = "python:…/env-2.0/bin/python", steady: float = 116e-6) -> PerfFigures:
    return PerfFigures(
        target=target,
        script=ScriptRole.PRE,
        processes={"cold": 1, "warm": 4},
        compile_cold_s=Spread(0.52, 0.52, 0.52, 1),
        compile_warm_s=Spread(0.31, 0.21, 0.43, 4),
        steady_s=Spread(steady, steady * 0.9, steady * 1.2, 5),
        eager_s=Spread(steady * 1.1, steady, steady * 1.3, 5),
        speedup=Spread(1.05, 0.98, 1.2, 5),
        phases={"dynamo": 0.21},
        caches="no compile cache used",
        instructions="unavailable: no hardware instruction counter here",
        structure=PerfStructure(graphs=1, ops_per_graph=[21]),
        load="load 1.20 0.90 0.80 on 2 core(s)",
    )


def slower(target: str = "python:…/env-2.0/bin/python", why: str = STEADY_WHY, cause: str = "") -> PerfRecord:
    """A script timed slower than the run's baseline on the steady state, the other axes alike."""
    axes = [
        PerfAxisResult(PerfAxis.COMPILE_COLD, PerfVerdict.INCONCLUSIVE, 0.02, None, None, "1 and 1 process(es)"),
        PerfAxisResult(PerfAxis.COMPILE_WARM, PerfVerdict.SAME, -0.011, 0.7, 0.03, "-1.1% (p=0.7); within ±15%"),
        PerfAxisResult(PerfAxis.STEADY, PerfVerdict.SLOWER, 1.82, 0.000667, 0.012, why),
        PerfAxisResult(PerfAxis.SPEEDUP, PerfVerdict.SAME, 0.019, 0.77, 0.015, "+1.9% (p=0.77); within ±5%"),
    ]
    comparison = PerfComparison(
        BASELINE, axes, 2.3, "operators per graph [3] → [21]", cause or "library heavylib 1.0 → 2.0"
    )
    return PerfRecord(ScriptRole.PRE, figures(target), comparison)


def document_with(timed: PerfRecord, severity: Severity = Severity.INFO) -> ReplayDocument:
    """The 2.5.1 replay document of the starter archive, its item-branch result timed (as hand-edited or by
    an older casekit: the severity says info)."""
    data = read_replay_document(RESULTS)
    result = next(r for r in data.results if r.case == "item-branch")
    result.perf, result.severity = [timed], severity
    return data


# ------------------------------------------------------------------ JUnit


def _item_case(root: ET.Element, target: str) -> ET.Element:
    suite = next(s for s in root.iter("testsuite") if s.get("name") == target)
    return next(c for c in suite.iter("testcase") if c.get("name") == "item-branch")


def test_a_slower_axis_is_a_junit_failure_at_fail_on_warn_with_why() -> None:
    data = document_with(slower())
    target = next(r.target for r in data.results if r.case == "item-branch")
    at_warn = summarize(starter(), [("ci.json", data)], fail_on=FailOn.WARN)
    root = ET.fromstring(get_format("junit").render(at_warn)["junit.xml"])
    (failure,) = _item_case(root, target).iter("failure")
    message, body = failure.get("message") or "", failure.text or ""
    assert "(warn)" in message  # a slower axis is a warning, whatever severity the document said
    assert f"perf: pre-fix steady slower +182.0% against {BASELINE}" in message
    assert STEADY_WHY in body and "[A/A noise floor 1.2%]" in body  # the why: p, threshold, noise floor
    assert "structure: operators per graph [3] → [21]" in body and "library heavylib 1.0 → 2.0" in body
    at_error = summarize(starter(), [("ci.json", data)], fail_on=FailOn.ERROR)
    passed = _item_case(ET.fromstring(get_format("junit").render(at_error)["junit.xml"]), target)
    assert not list(passed.iter("failure"))
    assert "steady: slower" in (passed.findtext("system-out") or "")


def test_an_axis_that_is_not_slower_raises_nothing() -> None:
    timed = slower()
    assert timed.comparison is not None
    for axis in timed.comparison.axes:
        axis.verdict = PerfVerdict.SAME if axis.verdict is PerfVerdict.SLOWER else axis.verdict
    at_warn = summarize(starter(), [("ci.json", document_with(timed))], fail_on=FailOn.WARN)
    (cell,) = [c for c in at_warn.cells() if c.case_id == "item-branch" and c.source == "ci.json"]
    assert cell.severity is Severity.INFO and cell.slower() == []


# ------------------------------------------------------------------ Markdown


def test_the_step_summary_gives_each_axis_its_verdict() -> None:
    text = get_format("md").render(summarize(starter(), [("ci.json", document_with(slower()))]))["report.md"]
    section = text.split("### Performance", 1)[1]
    (row,) = [line for line in section.splitlines() if line.startswith("| item-branch")]
    assert "⚠️ compile cold inconclusive +2.0%, compile warm same -1.1%, steady slower +182.0%" in row
    assert "116 µs \\[104–139, n=5\\]" in row  # the median with its spread, escaped where it reads as markup


def test_the_step_summary_shows_other_peoples_text_inert() -> None:
    timed = PerfRecord(ScriptRole.PRE, figures(), skipped=HOSTILE_MD)
    data = document_with(timed)
    (result,) = [r for r in data.results if r.case == "item-branch"]
    result.target = "python:a|b`|`c"  # a pipe splits a table cell, even inside a code span
    text = get_format("md").render(summarize(starter(), [("ci.json", data)]))["report.md"]
    section = text.split("### Performance", 1)[1]
    rendered = MarkdownIt("commonmark").enable("table").render(section)
    assert "<a " not in rendered and "<img" not in rendered and "tracker.example/p" in rendered
    assert "@<!-- -->team" in text  # no mention: GitHub reads @team from the rendered text
    (row,) = [line for line in section.splitlines() if line.startswith("| item-branch")]
    assert len(re.split(r"(?<!\\)\|", row)) == 2 + 8  # the edges and the eight columns: none injected
    control = MarkdownIt("commonmark").render(HOSTILE_MD)  # the same text, not made inert
    assert '<a href="http://tracker.example/p">' in control and "<img" in control


def test_the_json_report_carries_the_timings_for_tooling() -> None:
    summary = summarize(starter(), [("ci.json", document_with(slower()))])
    data = json.loads(get_format("json").render(summary)["report.json"])
    item = next(case for case in data["cases"] if case["id"] == "item-branch")
    (cell,) = [cell for cell in item["latest"].values() if "perf" in cell]
    (timed,) = cell["perf"]
    assert [axis["verdict"] for axis in timed["comparison"]["axes"]] == ["inconclusive", "same", "slower", "same"]
    assert timed["figures"]["steady_s"] == {"median": 116e-6, "low": 116e-6 * 0.9, "high": 116e-6 * 1.2, "n": 5}
    assert cell["severity"] == "warn"


# ------------------------------------------------------------------ HTML


def test_the_case_page_shows_compile_and_steady_with_their_spread() -> None:
    files = get_format("html").render(summarize(starter(), [("ci.json", document_with(slower()))]))
    page = files["cases/item-branch.html"]
    perf = page.split('<section id="perf">', 1)[1].split("</section>", 1)[0]
    assert "<td>310 ms [210–430, n=4]</td>" in perf and "<td>116 µs [104–139, n=5]</td>" in perf
    assert f'<span class="perf-slower" title="{STEADY_WHY}">steady slower +182.0%</span>' in perf
    timeline = page.split('<section id="timeline">', 1)[1]
    for axis in ("compile_cold", "compile_warm", "steady"):
        assert f'class="chart chart-perf-{axis}"' in timeline
    assert 'class="spread"' in timeline  # the whisker: lowest to highest over the fresh processes
    assert "steady per call (perf), pre: 116 µs [104–139, n=5]" in timeline


def test_the_timeline_draws_perf_rows_from_history_and_capture_and_none_without(tmp_path: Path) -> None:
    case = copy.deepcopy(Archive(ARCHIVE).load("item-branch"))
    plain = timeline_svg(timeline_from_case(case))
    assert "chart-perf" not in plain  # an archive never timed draws what it drew before
    case.perf = [PerfRecord(ScriptRole.PRE, figures("capture", steady=80e-6))]
    case.replays[-1].perf = [slower()]
    timeline = timeline_from_case(case)
    capture, *replays = timeline.columns
    assert capture.perf[PerfAxis.STEADY][ScriptRole.PRE].median == 80e-6
    assert [c.perf[PerfAxis.STEADY][ScriptRole.PRE].median for c in replays if c.perf] == [116e-6]
    assert timeline_svg(timeline).count('class="spread"') >= 3


def test_the_case_page_escapes_other_peoples_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    timed = slower(why=HOSTILE_HTML, cause=HOSTILE_HTML)
    summary = summarize(starter(), [("ci.json", document_with(timed))])
    page = get_format("html").render(summary)["cases/item-branch.html"]
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;perf&quot;)" in page
    monkeypatch.setattr(report_html, "h", str)  # control: the same page with escaping off
    unescaped = get_format("html").render(summary)["cases/item-branch.html"]
    assert HOSTILE_HTML in unescaped.split('<section id="perf">', 1)[1]


# ------------------------------------------------------------------ the bundle: history, capture, show


def _timed_case() -> Case:
    case = copy.deepcopy(Archive(ARCHIVE).load("item-branch"))
    case.perf = [PerfRecord(ScriptRole.PRE, figures("python:current", steady=80e-6))]
    case.replays[-1].perf = [slower(), PerfRecord(ScriptRole.POST, PerfFigures("x", ScriptRole.POST), skipped="no")]
    return case


def test_the_bundle_keeps_capture_and_history_timings_and_reads_them_back() -> None:
    case = _timed_case()
    text = case_to_toml(case)
    again = parse_case(text, "x.toml")
    assert again.perf == case.perf and again.replays[-1].perf == case.replays[-1].perf
    assert again.replays[0].perf is None  # a replay without --perf keeps none
    broken = text.replace("median = 0.000116", 'median = "fast"', 1)
    with pytest.raises(BundleError, match=r"replays\[\d+\]\.perf\[0\]\.figures\.steady_s\.median': expected a number"):
        parse_case(broken, "x.toml")


def test_the_archive_index_keeps_history_timings(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "cases")
    archive.save(_timed_case())
    first = {c.id: c for c in archive.summaries()}["item-branch"]
    second = {c.id: c for c in Archive(tmp_path / "cases").summaries()}["item-branch"]  # from the index now
    assert first.replays[-1].perf == second.replays[-1].perf == _timed_case().replays[-1].perf


def test_record_perf_adds_the_timing_to_the_record_this_run_appended(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "cases")
    case = copy.deepcopy(Archive(ARCHIVE).load("item-branch"))
    ours = dataclasses.replace(case.replays[-1], at="2099-01-01T00:00:00+00:00", target="python:new", perf=None)
    other = dataclasses.replace(ours, target="python:old")
    case.replays += [other, ours]
    archive.save(case)
    from casekit.perf.phase import PerfResult

    timed = slower()
    run = TargetRun(label="python:new", spec=TargetSpec("python", python=str(tmp_path / "env" / "bin" / "python")))
    run.recorded, run.recorded_at = ["item-branch"], ours.at
    timed.figures.steady_unavailable = f"read {tmp_path}/env/lib/x.py"  # a target's path: not kept in a bundle
    run.perf = [PerfResult("item-branch", ScriptRole.PRE, timed.figures, timed.comparison)]
    record_perf(archive, run)
    saved = archive.load("item-branch").replays
    assert saved[-2].perf is None and saved[-1].perf is not None
    (kept,) = saved[-1].perf
    assert kept.comparison == timed.comparison and kept.figures.steady_s == timed.figures.steady_s
    assert str(tmp_path) not in case_to_toml(archive.load("item-branch"))
    assert run.perf[0].figures.steady_unavailable.startswith(f"read {tmp_path}")  # the document's copy is as measured


def test_show_prints_the_captures_timing_with_the_load_and_the_date() -> None:
    case = _timed_case()
    case.created = "2026-11-30T23:55:36+00:00"
    text = case_summary(case)
    assert "timed at capture on 2026-11-30 23:55 UTC (load 1.20 0.90 0.80 on 2 core(s)): figures only" in text
    assert "never a baseline" in text
    assert "item-branch pre-fix: compile cold 520 ms, warm 310 ms [210–430, n=4]; steady 80 µs [72–96, n=5]" in text


# ------------------------------------------------------------------ bisect --perf: the rule


def test_a_perf_rule_names_an_axis_and_a_threshold() -> None:
    steady = PerfRule.parse("slower:10%")
    assert (steady.axis, steady.threshold, steady.settings.cold) == (PerfAxis.STEADY, 0.10, 0)
    assert steady.settings.thresholds["steady"] == 0.10 and steady.settings.warm >= 4
    warm = PerfRule.parse("compile-slower:12.5%", "warm=6")
    assert (warm.axis, warm.settings.thresholds["compile"], warm.settings.cold, warm.settings.warm) == (
        PerfAxis.COMPILE_WARM,
        0.125,
        1,
        6,
    )
    assert "12.5%" in warm.describe()
    assert PerfRule.parse("cold-compile-slower:20%").settings.cold == 5


@pytest.mark.parametrize(
    ("rule", "repeats", "said"),
    [
        ("faster:10%", None, "use RULE:P%"),
        ("slower", None, "use RULE:P%"),
        ("slower:0%", None, "use RULE:P%"),
        ("slower:ten", None, "use RULE:P%"),
        ("slower:10%", "warm=2", "give at least 4 a side"),
        ("cold-compile-slower:20%", "cold=2", "give at least 5 a side"),
        ("compile-slower:15%", "cold=0", "a cold round first"),
    ],
)
def test_a_bad_perf_rule_is_one_line(rule: str, repeats: str | None, said: str) -> None:
    with pytest.raises(BisectError, match=said):
        perf_rule_for(rule, repeats)


def test_perf_bisects_one_case_alone_by_its_timing() -> None:
    rule = PerfRule.parse("slower:10%")
    with pytest.raises(BisectError, match="one case at a time"):
        BisectRequest("2.5.1", "2.13.0", all_cases=True, perf=rule)
    with pytest.raises(BisectError, match="--perf follows the timing"):
        BisectRequest("2.5.1", "2.13.0", ("x",), predicate=predicate_for(site="x.py:3"), perf=rule)
    with pytest.raises(BisectError, match="builds nothing ahead"):
        BisectRequest("2.5.1", "2.13.0", ("x",), ahead=2, perf=rule)
    with pytest.raises(BisectError, match="--perf-repeats goes with --perf"):
        perf_rule_for(None, "warm=5")
    assert BisectRequest("2.5.1", "2.13.0", ("x",), perf=rule).perf == rule


def test_the_preflight_says_in_one_line_that_the_ends_do_not_differ() -> None:
    config = ReleaseBisect("2.5.1", "2.13.0")
    rule = PerfRule.parse("slower:10%")
    said = "steady same: +1.0% (p=0.6); within ±10%; 2.5.1 41 µs [40–44, n=8] → 2.13.0 41.4 µs [40–45, n=4]"
    with pytest.raises(BisectError) as refused:
        _preflight("not slower", Evaluated("not slower", said, {}), config, rule)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("the ends do not differ by the rule (steady state per call slower")
    assert said in line and line.endswith("nothing to bisect")
    with pytest.raises(BisectError, match="the bad end 2.13.0 could not be timed: environment failed: no torch"):
        _preflight(UNKNOWN, Evaluated(UNKNOWN, "environment failed: no torch", {}), config, rule)
    _preflight(SLOWER, Evaluated(SLOWER, "steady slower", {}), config, rule)  # they differ: the search goes on


def test_a_result_from_a_document_older_than_perf_reads_as_before() -> None:
    data = read_replay_document(RESULTS)
    assert all(result.perf == [] for result in data.results)
    summary = summarize(starter(), [("ci.json", data)])
    assert all(cell.perf == [] for cell in summary.cells())
