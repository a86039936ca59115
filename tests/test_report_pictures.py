"""The report's pictures: timeline, heatmap and bisection SVG, from an archive replayed on three releases.

tests/fixtures/pictures/archive holds the nine starter cases replayed with
`casekit replay` on torch 2.5.1 and 2.8.0 (managed venvs) and twice on 2.13.0
(this machine's interpreter), so the pictures are drawn from real histories.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bisect.engine import Step
from casekit.bisect.predicates import Direction
from casekit.bisect.report import BisectReport, WhatChanged, render_text, report_to_json
from casekit.model import Case, ReplayRecord, ScriptRole, ScriptStatus, Severity, SiteClass, SiteVerdict, Verdict
from casekit.report.formats import get_format
from casekit.report.html import render_bisect_html
from casekit.report.pictures import (
    STATUS_ERROR,
    VERDICT_FILL,
    TimelineRow,
    bisect_svg,
    heatmap_from_summary,
    heatmap_svg,
    timeline_from_case,
    timeline_svg,
)
from casekit.report.summary import summarize
from casekit.versions import version_order

ARCHIVE = Path(__file__).parent / "fixtures" / "pictures" / "archive"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {case.id: case for case in Archive(ARCHIVE).load_all()}


def parse_svg(svg: str) -> ET.Element:
    """Well-formed XML, an <svg> root that names itself to assistive technology."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img" and root.get("aria-labelledby")
    assert root.find(f"{SVG}title") is not None and root.find(f"{SVG}desc") is not None
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def groups(root: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if css in (g.get("class") or "").split()]


def test_the_fixture_is_replayed_on_three_releases(cases: dict[str, Case]) -> None:
    releases = {r.torch.split("+")[0] for case in cases.values() for r in case.replays}
    assert len(releases) >= 3 and {"2.5.1", "2.8.0", "2.13.0"} <= releases


def test_versions_sort_as_versions_not_strings() -> None:
    ordered = sorted(["2.13.0+cpu", "2.5.1", "nightly", "2.8.0", "2.10.0.dev20250101"], key=version_order)
    assert ordered == ["2.5.1", "2.8.0", "2.10.0.dev20250101", "2.13.0+cpu", "nightly"]


def test_timeline_columns_follow_release_order_and_date_a_repeated_release(cases: dict[str, Case]) -> None:
    for case in cases.values():
        timeline = timeline_from_case(case)
        assert timeline.columns[0].label == "recorded"
        replays = timeline.columns[1:]
        assert len(replays) == len(case.replays)
        keys = [(version_order(c.torch), c.at) for c in replays]
        assert keys == sorted(keys)
        repeats = Counter(c.torch for c in replays)
        for column in replays:
            assert (column.label == column.torch) == (repeats[column.torch] == 1)
            if repeats[column.torch] > 1:
                assert column.label.startswith(column.torch + " ") and column.at[11:16] in column.label


def test_timeline_marks_are_the_history_classes(cases: dict[str, Case]) -> None:
    """Each replay column carries exactly its record's site classes, per script line."""
    for case in cases.values():
        timeline = timeline_from_case(case)
        by_at = {c.at: c for c in timeline.columns[1:]}
        for record in case.replays:
            expected: dict[str, Counter[str]] = {}
            for verdict in record.sites:
                key = TimelineRow(verdict.script, verdict.where).key
                expected.setdefault(key, Counter())[verdict.site_class.value] += 1
            assert by_at[record.at].marks == expected
        rows = {row.key for row in timeline.rows}
        assert rows == {key for column in timeline.columns for key in column.marks}


def test_a_line_with_a_gone_and_a_persisting_break_shows_both(cases: dict[str, Case]) -> None:
    case = cases["logging-in-forward"]
    record = next(r for r in case.replays if r.torch == "2.5.1")
    classes = Counter(v.site_class.value for v in record.sites if v.where == "repro.py:16")
    assert classes["gone"] and classes["persists"]  # the fixture's 2.5.1 replay: 5 library breaks gone
    root = parse_svg(timeline_svg(timeline_from_case(case)))
    pair = [g for g in groups(root, "mark") if "2.5.1" in (g.findtext(f"{SVG}title") or "")]
    assert {g.get("class") for g in pair} == {"mark mark-gone", "mark mark-persists"}
    assert f"{classes['gone']} gone, {classes['persists']} persists" in (pair[0].findtext(f"{SVG}title") or "")


def test_timeline_charts_graphs_and_compile_time_from_the_history(cases: dict[str, Case]) -> None:
    case = cases["metrics-disable"]
    root = parse_svg(timeline_svg(timeline_from_case(case)))
    tips = [g.findtext(f"{SVG}title") or "" for g in root.iter(f"{SVG}g")]
    for record in case.replays:
        assert record.graphs and record.compile_s  # the fixture history carries both figures
    capture = case.observations["pre"]
    assert f"graphs, pre: {capture.graphs}" in tips
    graph_bars = [t for t in tips if t.startswith("graphs, ")]
    time_bars = [t for t in tips if t.startswith("compile time (first call), ")]
    assert len(graph_bars) == len(time_bars) == 2 * (1 + len(case.replays))  # pre and post per column


def test_a_failed_script_is_red_and_its_breaks_unobserved(cases: dict[str, Case]) -> None:
    case = copy.deepcopy(cases["item-branch"])
    case.replays.append(
        ReplayRecord(
            at="2030-01-01T00:00:00+00:00",
            target="venv:torch-2.14.0",
            torch="2.14.0",
            runner="venv",
            verdict=Verdict.REGRESSED,
            severity=Severity.ERROR,
            statuses={ScriptRole.PRE: ScriptStatus.COMPILE_ERROR, ScriptRole.POST: ScriptStatus.OK},
            reasons=["pre: ok -> compile_error"],
        )
    )
    timeline = timeline_from_case(case)
    last = timeline.columns[-1]
    assert last.torch == "2.14.0"
    pre_rows = [row.key for row in timeline.rows if row.script == "pre"]
    assert pre_rows and all(last.marks_at(key) == ["unobserved"] for key in pre_rows)
    root = parse_svg(timeline_svg(timeline))
    errors = groups(root, "status-error")
    assert len(errors) == 1 and "compile_error" in texts(errors[0])
    assert errors[0].find(f"{SVG}rect").get("fill") == STATUS_ERROR  # type: ignore[union-attr]
    graphs = next(iter(groups(root, "chart-graphs")))
    assert texts(graphs)[-1] == "n/a"  # a record without figures says so, it does not draw a zero


def test_every_bundle_string_is_escaped() -> None:
    hostile = '<script>alert("x")</script> & ]]>'
    case = copy.deepcopy(next(iter(Archive(ARCHIVE).load_all())))
    case.id, case.title = "hostile", hostile
    case.replays = [
        ReplayRecord(
            at="2030-01-01T00:00:00+00:00",
            target=hostile,
            torch=hostile,
            runner="python",
            verdict=Verdict.CHANGED,  # verdicts and statuses are closed enums: the loader refuses any other text
            severity=Severity.WARN,
            statuses={ScriptRole.PRE: ScriptStatus.CRASHED},
            sites=[SiteVerdict(ScriptRole.PRE, SiteClass.NEW, f"{hostile}:3", hostile)],
            reasons=[hostile],
        )
    ]
    svg = timeline_svg(timeline_from_case(case))
    root = parse_svg(svg)
    assert "<script" not in svg and root.find(f".//{SVG}script") is None
    assert any(hostile in (t.findtext(f"{SVG}title") or "") for t in root.iter(f"{SVG}g"))
    heat = heatmap_svg(heatmap_from_summary(summarize([case])))
    assert "<script" not in heat and parse_svg(heat) is not None


def test_heatmap_cells_match_the_summary_in_release_order(cases: dict[str, Case]) -> None:
    summary = summarize(list(cases.values()))
    root = parse_svg(heatmap_svg(heatmap_from_summary(summary)))
    cells = groups(root, "heat-cell")
    assert len(cells) == len(summary.cases) * len(summary.targets) == 27
    expected = Counter(cell.verdict for cell in summary.cells())
    assert Counter(g.get("data-verdict") for g in cells) == expected
    for g in cells:
        rect = g.find(f"{SVG}rect")
        assert rect is not None and rect.get("fill") == VERDICT_FILL[g.get("data-verdict") or ""][0]
        assert (g.findtext(f"{SVG}title") or "").count(" on ") >= 1
    heads = [t for t in texts(root) if t[:1].isdigit()]
    assert heads == ["2.5.1", "2.8.0", "2.13.0+cpu"]
    legend = " ".join(texts(next(iter(groups(root, "legend")))))
    assert all(word in legend for word in ("unchanged", "improved", "changed", "regressed", "not replayed"))


def bisect_doc(subject: str = "item-branch") -> dict[str, object]:
    report = BisectReport(
        kind="versions",
        subject=subject,
        predicate="verdict",
        runner="venv",
        candidates=["2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.0"],
        good_outcome="changed",
        bad_outcome="unchanged",
        last_good="2.6.0",
        first_bad="2.7.1",
        first_bad_outcome="unchanged",
        direction=Direction.FIX,
        ambiguous=[],
        steps=[
            Step("2.5.1", "changed", "pre: recompiles 1 -> 2"),
            Step("2.9.0", "unchanged"),
            Step("2.7.1", "unchanged", cached=True),
            Step("2.6.0", "changed", "<b>detail</b>"),
        ],
        changed=WhatChanged("2.5.1", ["torch 2.6.0 -> 2.7.1: the recompile is gone"], [], Verdict.IMPROVED, []),
        reproduce="casekit bisect item-branch --from 2.5.1 --to 2.9.0",
    )
    return report_to_json(report)


def test_bisect_picture_marks_steps_and_the_change() -> None:
    doc = bisect_doc()
    root = parse_svg(bisect_svg(doc))
    steps = groups(root, "bisect-step")
    assert len(steps) == 5
    words = [texts(g)[0] for g in steps]
    # a fix: the release that fixed it is "fixed", in green, never "bad" in red
    assert words == ["#1 unfixed", "#4 unfixed", "#3 fixed", "not tried", "#2 fixed"]
    fills = [g.find(f"{SVG}rect").get("fill") for g in steps]  # type: ignore[union-attr]
    assert fills[2] == fills[4] == "#aceebb" and "#ff8182" not in fills
    boundary = groups(root, "bisect-boundary")
    assert len(boundary) == 1 and "2.6.0 and 2.7.1" in (boundary[0].findtext(f"{SVG}title") or "")
    assert boundary[0].find(f"{SVG}line").get("stroke") != "#cf222e"  # type: ignore[union-attr]
    regression = parse_svg(bisect_svg({**doc, "result": "regression"}))
    steps = groups(regression, "bisect-step")
    assert [texts(g)[0] for g in steps] == ["#1 good", "#4 good", "#3 bad", "not tried", "#2 bad"]
    assert steps[2].find(f"{SVG}rect").get("fill") == "#ff8182"  # type: ignore[union-attr]


def test_the_reproduce_block_of_a_shared_page_names_no_folder_of_this_machine() -> None:
    """The interpreter and archive of the command are named as labels name them; the terminal keeps them."""
    from dataclasses import replace

    from casekit.bisect.report import report_from_json

    interpreter = "/srv/ci/run-4411/tmp.Xq2/envs/nightly/bin/python"
    command = f"casekit replay --case item-branch --python {interpreter} --archive /srv/ci/run-4411/cases --no-record"
    report = replace(report_from_json(bisect_doc(), "<doc>"), reproduce=command)
    page = render_bisect_html(report_to_json(report))
    assert interpreter not in page and "/srv/ci" not in page
    assert "--python …/nightly/bin/python --archive …/ci/run-4411/cases --no-record" in page
    assert f"reproduce with: {command}" in render_text(report)


def test_a_fix_bisected_reads_as_a_fix_on_its_page() -> None:
    """The terminal says 'fix in 2.7.1, last unfixed 2.6.0, first fixed 2.7.1': so do the page and its steps."""
    page = render_bisect_html(bisect_doc())
    assert "last unfixed <code>2.6.0</code>, first fixed <code>2.7.1</code>" in page
    assert "first bad" not in page and "(bad)" not in page and "(fixed)</td>" in page
    regression = render_bisect_html({**bisect_doc(), "result": "regression"})
    assert "last good <code>2.6.0</code>, first bad <code>2.7.1</code>" in regression


def test_render_bisect_html_is_a_whole_escaped_page() -> None:
    page = render_bisect_html(bisect_doc())
    assert page.startswith("<!DOCTYPE html>") and "bisect-svg" in page
    assert "&lt;b&gt;detail&lt;/b&gt;" in page and "<b>detail</b>" not in page
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    parse_svg(svg)
    assert "casekit bisect item-branch --from 2.5.1 --to 2.9.0" in page


def test_timeline_draws_the_bisected_boundary(cases: dict[str, Case]) -> None:
    timeline = timeline_from_case(cases["item-branch"])
    root = parse_svg(timeline_svg(timeline, [bisect_doc()]))
    boundary = groups(root, "bisect-boundary")
    assert len(boundary) == 1 and "last unfixed 2.6.0 -> first fixed 2.7.1" in (
        boundary[0].findtext(f"{SVG}title") or ""
    )
    line = boundary[0].find(f"{SVG}line")
    heads = groups(root, "column-head")
    first_after = next(g for g in heads if texts(g)[0] == "2.8.0")  # first replayed release >= 2.7.1
    assert line is not None and float(line.get("x1") or 0) == pytest.approx(
        float(first_after.find(f"{SVG}rect").get("x") or 0) - 3  # type: ignore[union-attr]
    )
    other = parse_svg(timeline_svg(timeline, [bisect_doc("another-case")]))
    assert not groups(other, "bisect-boundary")


def test_html_report_embeds_the_pictures(cases: dict[str, Case]) -> None:
    files = get_format("html").render(summarize(list(cases.values())))
    index = files["index.html"]
    assert index.count('class="heatmap-svg"') == 1 and index.index("heatmap-svg") < index.index('id="matrix"')
    for case_id in cases:
        page = files[f"cases/{case_id}.html"]
        assert page.count('class="timeline-svg"') == 1
        parse_svg(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])
    assert "@media print" in index


def test_no_pictures_before_any_replay(cases: dict[str, Case]) -> None:
    fresh = copy.deepcopy(cases["tensor-if"])
    fresh.replays = []
    files = get_format("html").render(summarize([fresh]))
    assert "heatmap-svg" not in files["index.html"]
    assert "timeline-svg" in files["cases/tensor-if.html"]  # the capture alone is still a column


REAL_BISECT = (
    Path(__file__).parent / "fixtures" / "pictures" / "bisect-logging-in-forward.json"
)  # `casekit bisect --json`


def test_a_real_bisection_renders_with_its_boundary_and_on_the_timeline(cases: dict[str, Case]) -> None:
    doc = json.loads(REAL_BISECT.read_text(encoding="utf-8"))
    assert doc["schema"] == "casekit.bisect/1"
    root = parse_svg(bisect_svg(doc))
    steps = groups(root, "bisect-step")
    assert [texts(g)[1] for g in steps] == doc["searched"]["candidates"]
    assert sorted(texts(g)[0] for g in steps) == sorted(
        f"#{n} {'good' if s['outcome'] == doc['good_outcome'] else 'bad'}" for n, s in enumerate(doc["steps"], 1)
    )
    timeline = parse_svg(timeline_svg(timeline_from_case(cases[doc["subject"]]), [doc]))
    line = groups(timeline, "bisect-boundary")
    assert len(line) == 1 and doc["first_bad"] in " ".join(texts(line[0]))


# ------------------------------------------------------------------ what --results and fallbacks add

REPORT = Path(__file__).parent / "fixtures" / "report"


def test_the_timeline_draws_the_replay_given_with_results():
    """`replay --json F` (no --record), then `report --results F`: the case page's timeline has its column."""
    from casekit.replay.document import read_replay_document

    case = copy.deepcopy(Archive(REPORT / "archive").load("item-branch"))
    case.replays = []  # nothing recorded: only the results file knows the replay
    document = read_replay_document(REPORT / "replay-torch-2.5.1.json")
    summary = summarize([case], [("replay-torch-2.5.1.json", document)])
    page = get_format("html").render(summary)["cases/item-branch.html"]
    (svg,) = [part for part in page.split("<svg")[1:] if 'class="timeline-svg"' in part]
    heads = [t for t in svg.split("<title>")[1:] if "(--results, not recorded)" in t]
    assert heads and "changed (warn)" in heads[0], heads  # the column of the results file, with its verdict
    marks = Counter(mark.split('"')[0] for mark in svg.split('class="mark mark-')[1:])
    assert marks["recorded"] and sum(v for k, v in marks.items() if k != "recorded") >= 1, marks


def corpus_case_replayed(name: str, captured_on: str, replayed_on: str) -> Case:
    """A corpus repro captured on one release with its history entry of a real replay on the other."""
    import sys

    from casekit.bundle import sha256_text
    from casekit.classify import classify_case
    from casekit.model import ScriptSource
    from casekit.replay.run import TargetRun, replay_record
    from casekit.runners.interface import TargetSpec

    sys.path.insert(0, str(Path(__file__).parent / "corpus"))
    import confusion

    source = (confusion.HERE / name / "repro.py").read_text()
    case = Case(
        id=name,
        title=name,
        pre=ScriptSource("repro.py", sha256_text(source), source),
        observations={"pre": confusion.observation(name, captured_on)},
        environment={"torch": captured_on},
    )
    result = classify_case(case, "python:current", {"pre": confusion.observation(name, replayed_on)})
    run = TargetRun(TargetSpec("python"), "python:current", environment={"torch": replayed_on})
    case.replays.append(replay_record(result, run))
    return case


def test_a_frame_that_now_falls_back_has_a_row_and_a_worse_mark():
    """bool_mask_getitem: on 2.13 `inner` falls back to eager entirely (the break persists, reworded);
    its row says new, in red, so the column cannot read as an improvement."""
    case = corpus_case_replayed("bool_mask_getitem", "2.5.1", "2.13.0")
    timeline = timeline_from_case(case)
    (row,) = [r for r in timeline.rows if r.is_fallback]
    assert row.label == "pre falls back to eager: inner (repro.py:7)"
    capture, replay = timeline.columns
    assert capture.marks_at(row.key) == [] and replay.marks_at(row.key) == [SiteClass.NEW.value]
    back = corpus_case_replayed("bool_mask_getitem", "2.13.0", "2.5.1")  # the other way: cleared
    (row,) = [r for r in timeline_from_case(back).rows if r.is_fallback]
    capture, replay = timeline_from_case(back).columns
    assert capture.marks_at(row.key) == ["recorded"] and replay.marks_at(row.key) == [SiteClass.GONE.value]


def test_a_column_head_is_never_coloured_better_than_its_severity():
    from casekit.report.pictures import HEAT_LEGEND, SEVERITY_FLOOR, head_verdict

    for verdict in Verdict:
        for severity in Severity:
            shown = head_verdict(verdict, severity)
            assert HEAT_LEGEND.index(shown) >= HEAT_LEGEND.index(verdict)
            assert HEAT_LEGEND.index(shown) >= HEAT_LEGEND.index(SEVERITY_FLOOR[severity])
    assert head_verdict(Verdict.IMPROVED, Severity.WARN) is Verdict.CHANGED  # a warning is not green
    assert head_verdict(Verdict.UNCHANGED, Severity.INFO) is Verdict.UNCHANGED


def _readme_flow(tmp_path: Path, record: bool) -> tuple[Case, list[ReplayRecord]]:
    """`replay --commit --json X` (here: --record; the commit adds nothing the timeline reads), then
    `report --results X`: the case and the replays the report is given. Two targets ran one torch."""
    from casekit.replay.document import read_replay_document
    from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
    from casekit.replay.run import ReplayOptions

    from .fakes import Target, captured_archive, recorded_targets

    archive = captured_archive(tmp_path / "cases")
    _, factory, _ = recorded_targets({"team/envs/a": Target("2.13.0"), "team/envs/b": Target("2.13.0")})
    out = tmp_path / "X.json"
    request = ReplayRequest(
        targets=TargetChoice(pythons=("team/envs/a", "team/envs/b")), json_out=out, options=ReplayOptions(record=record)
    )
    run_replay(request, archive, factory, lambda message: None)
    case = archive.load("breaks")
    summary = summarize([case], [("X.json", read_replay_document(out))])
    return case, [cell.record for cell in summary.cases[0].cells.values() if cell.record is not None]


def test_a_replay_recorded_and_given_as_results_is_one_column(tmp_path: Path) -> None:
    case, given = _readme_flow(tmp_path, record=True)
    assert len(case.replays) == 2 and len(given) == 2  # each replay twice: in the history and in X
    timeline = timeline_from_case(case, given)
    replays = [column for column in timeline.columns if column.verdict]
    assert len(replays) == 2, [column.describe() for column in replays]
    assert all(column.at for column in replays)  # drawn from the history, which knows when it ran


def test_results_columns_of_one_release_say_their_target_and_their_compile_time(tmp_path: Path) -> None:
    case, given = _readme_flow(tmp_path, record=False)
    timeline = timeline_from_case(case, given)
    replays = [column for column in timeline.columns if column.verdict]
    heads = [column.label.partition(" ")[2] for column in replays]
    assert len(set(heads)) == 2 and "results" not in heads, heads
    assert [head[-1] for head in heads] == ["a", "b"], heads  # the part of the target that differs: …/envs/a
    assert all(column.compile_s.get(ScriptRole.PRE) for column in replays)  # not n/a: the document keeps it
    [chart] = groups(parse_svg(timeline_svg(timeline)), "chart-compile")
    assert "n/a" not in texts(chart), texts(chart)
