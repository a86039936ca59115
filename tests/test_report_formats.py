"""The report formats over the starter archive (captured on 2.13.0, replayed on 2.13.0 and 2.5.1).

tests/fixtures/report/archive holds real bundles: `casekit capture` of the nine
starter repros with their fixes, then `casekit replay` on the local torch 2.13.0
and on a managed torch 2.5.1 venv; replay-torch-2.5.1.json is that replay's --json.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from casekit.archive.store import Archive
from casekit.cli.records import register
from casekit.errors import CasekitError
from casekit.model import Case, ReplayRecord, ScriptRole, ScriptStatus, Severity, SiteClass, SiteVerdict, Verdict
from casekit.replay.document import read_replay_document
from casekit.report.formats import FORMATS, get_format
from casekit.report.interface import ReportFormat
from casekit.report.output import write_files
from casekit.report.summary import ArchiveSummary, summarize

FIXTURES = Path(__file__).parent / "fixtures" / "report"
ARCHIVE = FIXTURES / "archive"
RESULTS = FIXTURES / "replay-torch-2.5.1.json"
HOSTILE = '<script>alert("x")</script> | `tick` & <img src=x onerror=alert(1)>'


def starter() -> list[Case]:
    return Archive(ARCHIVE).load_all()


def hostile_case() -> Case:
    """Another team's bundle: text everywhere that would be markup if not escaped, and an error result."""
    case = copy.deepcopy(Archive(ARCHIVE).load("item-branch"))
    case.id = "hostile"
    case.title = HOSTILE
    case.tags = [HOSTILE, "draft"]
    case.notes = case.rollback_notes = HOSTILE + "\x07bell"
    case.observations["pre"].sites[0].reason = HOSTILE
    case.observations["pre"].log_excerpt = HOSTILE
    case.replays.append(
        ReplayRecord(
            "2099-01-01T00:00:00+00:00",
            "venv:torch-2.13.0",
            "2.13.0",
            "venv",
            Verdict.FIX_BROKEN,
            Severity.ERROR,
            {ScriptRole.PRE: ScriptStatus.OK, ScriptRole.POST: ScriptStatus.COMPILE_ERROR},
            [SiteVerdict(ScriptRole.POST, SiteClass.NEW, HOSTILE, HOSTILE)],
        )
    )
    return case


@pytest.fixture(scope="module")
def summary() -> ArchiveSummary:
    return summarize(starter())


def test_latest_result_per_target_fills_the_matrix(summary: ArchiveSummary) -> None:
    assert [t.label for t in summary.targets] == ["venv:torch-2.5.1", "python:current"]  # oldest torch first
    assert [t.torch for t in summary.targets] == ["2.5.1", "2.13.0+cpu"]
    assert len(summary.cases) == 9 and all(len(c.cells) == 2 for c in summary.cases)
    logging_case = next(c for c in summary.cases if c.case.id == "logging-in-forward")
    assert logging_case.cells["venv:torch-2.5.1"].verdict == "improved"
    assert logging_case.cells["venv:torch-2.5.1"].class_summary() == "5 gone"
    assert logging_case.cells["python:current"].class_summary() == "6 persist"
    assert summary.worst() is Severity.WARN


def test_a_results_document_overrides_the_history(summary: ArchiveSummary) -> None:
    data = read_replay_document(RESULTS)
    first = data.results[0]
    first.verdict, first.severity = Verdict.REGRESSED, Severity.ERROR
    overlaid = summarize(starter(), [("ci.json", data)])
    cell = next(c for c in overlaid.cases if c.case.id == first.case).cells[first.target]
    assert (cell.verdict, cell.severity, cell.source) == (Verdict.REGRESSED, Severity.ERROR, "ci.json")
    assert overlaid.worst() is Severity.ERROR


def test_every_format_is_registered_and_renders(summary: ArchiveSummary) -> None:
    for name in FORMATS:
        fmt = get_format(name)
        assert isinstance(fmt, ReportFormat)
        files = fmt.render(summary)
        assert fmt.main_file in files and files[fmt.main_file].strip()
    with pytest.raises(CasekitError, match="unknown report format"):
        get_format("pdf")


def test_html_is_one_static_page_per_case(summary: ArchiveSummary) -> None:
    files = get_format("html").render(summary)
    assert sorted(files) == sorted(["index.html"] + [f"cases/{c.case.id}.html" for c in summary.cases])
    for text in files.values():
        assert "<script" not in text and "<link" not in text and "@import" not in text  # works offline, nothing fetched
    page = files["cases/item-branch.html"]
    assert 'id="pre-L8" title="graph break GB0124"' in page and "break-line" in page
    assert 'href="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html"' in page
    assert "Dynamo does not support tracing `Tensor.item()`" in page  # the registry explanation
    assert "rollback" in page.lower() and 'class="timeline"' in page
    logging_page = files["cases/logging-in-forward.html"]
    assert 'id="pre-L16"' in logging_page and "logging/__init__.py:1488" in logging_page


def test_html_escapes_other_peoples_text() -> None:
    files = get_format("html").render(summarize([hostile_case()]))
    for text in files.values():
        assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in files["cases/hostile.html"]


def test_markdown_for_a_pull_request(summary: ArchiveSummary) -> None:
    text = get_format("md").render(summary)["report.md"]
    assert "**9 case(s) × 2 target(s)**" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 9 and table[0].count("<br>torch ") == 2
    assert "### Needs attention" in text and "item-branch" in text
    hostile_summary = summarize([hostile_case()])
    hostile = get_format("md").render(hostile_summary)["report.md"]
    rendered = MarkdownIt("commonmark").enable("table").render(hostile)  # what a reader sees, not the source
    assert "<script" not in rendered and "<img" not in rendered and "\\|" in hostile
    (row,) = [line for line in hostile.splitlines() if line.startswith("| **hostile")]
    assert len(re.split(r"(?<!\\)\|", row)) == 3 + len(
        hostile_summary.targets
    )  # edges, the case, one per target: no injected columns


def test_junit_has_one_testcase_per_case_and_target(summary: ArchiveSummary) -> None:
    root = ET.fromstring(get_format("junit").render(summary)["junit.xml"])
    assert root.get("tests") == "18" and root.get("failures") == "0"
    assert [s.get("name") for s in root.iter("testsuite")] == ["venv:torch-2.5.1", "python:current"]
    assert len(list(root.iter("testcase"))) == 18


def test_junit_fails_error_results_and_skips_holes() -> None:
    cases = starter()[:1] + [hostile_case()]
    root = ET.fromstring(
        get_format("junit").render(summarize(cases))["junit.xml"]
    )  # parses: control characters cleaned
    failures = list(root.iter("failure"))
    assert len(failures) == 1 and failures[0].get("type") == "fix_broken"
    assert "post: compile_error" in (failures[0].text or "")
    assert root.get("skipped") == "1"  # item-branch was never replayed on venv:torch-2.13.0


def test_json_for_tooling(summary: ArchiveSummary) -> None:
    data = json.loads(get_format("json").render(summary)["report.json"])
    assert data["schema"] == "casekit.report/1" and data["worst"] == "warn"
    item = next(c for c in data["cases"] if c["id"] == "item-branch")
    assert set(item["latest"]) == {"venv:torch-2.5.1", "python:current"} and item["breaks"] == {"pre": 1, "post": 0}


def test_write_files_stays_inside_the_folder(tmp_path: Path) -> None:
    with pytest.raises(CasekitError, match="would leave"):
        write_files({"../escape.html": "x"}, tmp_path / "out")


def test_report_command(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    out = tmp_path / "site"
    done = runner.invoke(
        app, ["report", "--archive", str(ARCHIVE), "--format", "html", "--format", "junit", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert (
        (out / "index.html").exists() and (out / "cases" / "tensor-if.html").exists() and (out / "junit.xml").exists()
    )
    printed = runner.invoke(
        app, ["report", "--archive", str(ARCHIVE), "--format", "md", "--out", "-", "--results", str(RESULTS)]
    )
    assert printed.exit_code == 0 and printed.output.startswith("## casekit archive")
    refused = runner.invoke(app, ["report", "--archive", str(ARCHIVE), "--out", "-"])
    assert refused.exit_code != 0 and "HTML report is a folder" in str(refused.exception)


def test_markdown_code_spans_show_their_text_as_written() -> None:
    """A code span decodes no entity: the target must not be HTML-escaped there (rendered by CommonMark)."""
    case = hostile_case()
    case.replays[-1].target = "python:<batch>/bin/python"
    twin = copy.deepcopy(case)
    twin.id, twin.replays[-1].target = "ticks", "docker:`a``b`<i>x</i>"
    text = get_format("md").render(summarize([case, twin]))["report.md"]
    rendered = MarkdownIt("commonmark").render(text)
    assert "<code>python:&lt;batch&gt;/bin/python</code>" in rendered  # shows as <batch>, not &lt;batch&gt;
    assert "&amp;lt;batch&amp;gt;" not in rendered
    assert "<code>docker:`a``b`&lt;i&gt;x&lt;/i&gt;</code>" in rendered  # backticks kept, no markup added
    assert "<i>" not in rendered and "<script>" not in rendered


def test_fail_on_warn_makes_warnings_junit_failures_and_fails_the_step_summary(tmp_path: Path) -> None:
    """CI sees what the terminal says: at --fail-on warn a fallback or a moved break is red in JUnit."""
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    base = ["report", "--archive", str(ARCHIVE), "--results", str(RESULTS), "-f", "junit", "-f", "md"]
    warned = sum(1 for cell in summarize(starter()).cells() if cell.severity is Severity.WARN)
    assert warned, "the starter archive's replays hold warnings"
    by_level = {}
    for level in ("error", "warn", "never"):
        done = runner.invoke(app, [*base, "--fail-on", level, "--out", str(tmp_path / level)])
        assert done.exit_code == 0, done.output  # the report renders; replay and merge set the exit code
        root = ET.fromstring((tmp_path / level / "junit.xml").read_text())
        by_level[level] = (root, (tmp_path / level / "report.md").read_text())
    default_root, default_md = by_level["error"]
    warn_root, warn_md = by_level["warn"]
    summary_with_results = summarize(starter(), [(RESULTS.name, read_replay_document(RESULTS))])
    errors = sum(1 for cell in summary_with_results.cells() if cell.severity is Severity.ERROR)
    warns = sum(1 for cell in summary_with_results.cells() if cell.severity is Severity.WARN)
    assert int(default_root.get("failures") or 0) == errors
    assert int(warn_root.get("failures") or 0) == errors + warns > errors
    assert any("(warn) on torch" in (f.get("message") or "") for f in warn_root.iter("failure"))
    assert [p.get("value") for p in warn_root.iter("property") if p.get("name") == "fail-on"][0] == "warn"
    assert int(by_level["never"][0].get("failures") or 0) == 0
    assert "**FAIL** at `--fail-on warn`" in warn_md and "— **fails**" in warn_md
    assert ("**FAIL**" in default_md) == bool(errors) and "--fail-on never`: no result fails" in by_level["never"][1]
    refused = runner.invoke(app, [*base, "--fail-on", "sometimes", "--out", str(tmp_path / "x")])
    assert refused.exit_code != 0 and "--fail-on must be error, warn, info or never" in str(refused.exception)
