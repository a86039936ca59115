"""What `casekit report` decides, in-process (`casekit.report.plan`): the formats, the cases read in full
only for a format that renders them, `--out -`, invalid bundles, and each format writing itself, so a
new folder format needs nothing beyond its module and its registry line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from casekit.archive.store import Archive
from casekit.cli.records import register
from casekit.errors import CasekitError
from casekit.outcome import ExitCode
from casekit.report import formats
from casekit.report.interface import ReportFormat
from casekit.report.plan import ReportRequest, run_report
from casekit.report.summary import ArchiveSummary

FIXTURES = Path(__file__).parent / "fixtures" / "report"


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    root = tmp_path / "archive"
    shutil.copytree(FIXTURES / "archive", root, ignore=shutil.ignore_patterns(".casekit*"))
    return Archive(root)


class FolderFormat(ReportFormat):
    """A site of its own: one page per case in a folder per case, written its own way."""

    name = "site"
    main_file = "site/index.txt"
    folder = True

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        files = {self.main_file: "\n".join(c.case.id for c in summary.cases)}
        files |= {f"site/{c.case.id}/page.txt": c.case.title for c in summary.cases}
        return files

    def write(self, summary: ArchiveSummary, out: Path, archive_root: Path) -> int:
        files = self.render(summary)
        for relative, text in files.items():
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            (out / relative).write_text(text + f"\n(from {archive_root.name})")
        return len(files)


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(formats.FORMATS, "site", FolderFormat)


def test_each_format_writes_itself_and_a_folder_format_needs_no_special_case(
    archive: Archive, tmp_path: Path, site: None
) -> None:
    out = tmp_path / "report"
    outcome = run_report(ReportRequest(("site", "md", "site"), out), archive)
    cases = archive.ids()
    assert outcome.exit_code is ExitCode.OK and outcome.printed is None
    assert outcome.written == [(out / "site/index.txt", 1 + len(cases)), (out / "report.md", 1)]
    assert (out / "site" / cases[0] / "page.txt").read_text().endswith("(from archive)")
    with pytest.raises(CasekitError, match=r"--out - prints one md, junit or json report; the SITE report is a folder"):
        ReportRequest(("site",), Path("-"))


def test_out_dash_prints_the_one_single_file_report(archive: Archive) -> None:
    outcome = run_report(ReportRequest(("md",), Path("-")), archive)
    assert outcome.printed is not None and outcome.printed.startswith("## casekit archive") and not outcome.written
    with pytest.raises(CasekitError, match="prints one"):
        ReportRequest(("md", "json"), Path("-"))
    with pytest.raises(CasekitError, match="unknown report format 'pdf'"):
        ReportRequest(("pdf",))


def test_whole_cases_are_read_only_for_a_format_that_renders_them(
    archive: Archive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []
    original = Archive.summaries_tolerant

    def spy(self: Archive, *args: object, keep_cases: bool = False, **kwargs: object):  # type: ignore[no-untyped-def]
        asked.append(keep_cases)
        return original(self, *args, keep_cases=keep_cases, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Archive, "summaries_tolerant", spy)
    run_report(ReportRequest(("md", "junit"), tmp_path / "a"), archive)
    run_report(ReportRequest(("md", "html"), tmp_path / "b"), archive)
    assert asked == [False, True]
    assert (tmp_path / "b" / "index.html").is_file() and (tmp_path / "b" / "cases").is_dir()


def test_an_invalid_bundle_is_named_and_exits_2_with_every_valid_case_reported(
    archive: Archive, tmp_path: Path
) -> None:
    (archive.root / "broken.toml").write_text("schema_version = 1\nid = 3\n")
    outcome = run_report(ReportRequest(("json",), tmp_path / "out"), archive)
    assert outcome.exit_code is ExitCode.PROBLEM and [str(e).split(":")[0] for e in outcome.invalid] == [
        str(archive.root / "broken.toml")
    ]
    assert (tmp_path / "out" / "report.json").is_file()


def test_the_help_lists_the_registry() -> None:
    app = typer.Typer()
    register(app)
    text = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).output
    assert f"{formats.format_names()} (repeatable)" in text
    assert all(name in formats.format_names() for name in formats.FORMATS)
    assert formats.format_names(["a"]) == "a" and formats.format_names(["a", "b", "c"]) == "a, b or c"
