"""The CLI a person likes to use: progress, quiet/verbose, recording default, drafts, one JSON
convention, did-you-mean, width-aware tables, precise wording.

Replays are served by the fake runner (tests/fakes.py, recorded real-torch probe
results) so each test runs in milliseconds; the real runs are in test_replay.py.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import casekit.cli.replay as replay_command
from casekit.archive.store import Archive
from casekit.cli import app
from casekit.errors import CasekitError, CaseNotFound
from casekit.progress import ProgressView, Verbosity, plain_output, set_verbosity
from casekit.report.text import describe_fallback, table

from .fakes import Target, recorded_targets
from .test_replay_fast import archive  # noqa: F401  (the five-case archive fixture)

PLAIN = {"NO_COLOR": "1", "COLUMNS": "80", "TERM": "dumb"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="casekit", env=PLAIN)


@pytest.fixture(autouse=True)
def normal_verbosity():
    yield
    set_verbosity(Verbosity.NORMAL)  # -q / -v are process-global: never leak into the next test


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch):
    _, factory, _ = recorded_targets({"t": Target("2.13.0")})
    monkeypatch.setattr(replay_command, "default_runner_factory", factory)


# ------------------------------------------------------------------ progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_is_one_line_per_step_and_hides_tool_output(monkeypatch: pytest.MonkeyPatch):
    stream = io.StringIO()
    view = ProgressView(stream, plain=True)
    view("[t] running 4 script(s) of 2 case(s)")
    view("[t] 1/4 a.pre done")
    view("[t]   uv: Resolved 12 packages")  # indented: tool output
    assert stream.getvalue().splitlines() == ["  ... [t] running 4 script(s) of 2 case(s)", "  ... [t] 1/4 a.pre done"]


def test_verbose_shows_tool_output_and_quiet_shows_nothing():
    loud, silent = io.StringIO(), io.StringIO()
    ProgressView(loud, level=Verbosity.VERBOSE)("[t]   uv: Resolved 12 packages")
    ProgressView(silent, level=Verbosity.QUIET)("[t] 1/4 a.pre done")
    assert "uv: Resolved 12 packages" in loud.getvalue()
    assert silent.getvalue() == ""


def test_a_terminal_gets_a_bar_per_target_that_counts_and_a_plain_log_never_gets_escapes(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    terminal = Terminal()
    assert not plain_output(terminal)
    with ProgressView.for_stderr(terminal) as view:
        assert isinstance(view, ProgressView) and view._bars is not None
        view("[venv:torch-2.5.1] 1/4 a.pre done")
        view("[venv:torch-2.5.1] 4/4 b.post done")
        task = view._tasks["venv:torch-2.5.1"]
        assert (task.completed, task.total) == (4, 4)
        assert (view._bars.tasks[-1].completed, view._bars.tasks[-1].fields["amount"]) == (4, "4/4")
    assert "venv:torch-2.5.1" in terminal.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    assert plain_output(Terminal())  # NO_COLOR: plain even on a terminal


def test_quiet_replay_prints_the_report_but_no_progress(archive: Archive, served: None):  # noqa: F811
    loud = CliRunner().invoke(app, ["replay", "--archive", str(archive.root), "--python", "t"], env=PLAIN)
    quiet = CliRunner().invoke(app, ["-q", "replay", "--archive", str(archive.root), "--python", "t"], env=PLAIN)
    assert "  ... [python:t]" in loud.stderr and "replaying 5 case(s)" in loud.stderr
    seconds = re.compile(r"in \d+\.\d s")  # a target's wall time may differ between the two runs
    assert quiet.stderr == "" and seconds.sub("in _ s", quiet.stdout) == seconds.sub("in _ s", loud.stdout)
    verbose = CliRunner().invoke(app, ["-v", "replay", "--archive", str(archive.root), "--python", "t"], env=PLAIN)
    unchanged = "on python:t: unchanged (info)"
    assert unchanged not in loud.stdout and verbose.stdout.count(unchanged) == 3  # -v: every result's detail
    both = CliRunner().invoke(app, ["-q", "-v", "list"], env=PLAIN)
    assert both.exit_code == 2 and "-q and -v contradict" in both.output


# ------------------------------------------------------------------ recording that fits git


def test_a_plain_replay_changes_no_bundle_and_record_does(archive: Archive, served: None):  # noqa: F811
    before = {p.name: p.read_bytes() for p in archive.root.glob("*.toml")}
    done = invoke("replay", "--archive", str(archive.root), "--python", "t")
    assert done.exit_code == 0, done.output
    assert {p.name: p.read_bytes() for p in archive.root.glob("*.toml")} == before
    report = invoke("report", "--archive", str(archive.root), "--out", str(archive.root.parent / "r"))
    assert (
        "no replays recorded yet: run `casekit replay --json out/replay.json` and "
        "`casekit report --results out/replay.json`, or replay with --record" in report.stderr
    )
    recorded = invoke("replay", "--archive", str(archive.root), "--python", "t", "--record")
    assert "recorded this replay in 5 bundle(s) (not committed)" in recorded.stdout
    assert all(len(archive.load(case_id).replays) == 1 for case_id in archive.ids())
    report = invoke("report", "--archive", str(archive.root), "--out", str(archive.root.parent / "r"))
    assert "no replays recorded yet" not in report.stderr


def test_commit_records_the_history_too(archive: Archive, served: None):  # noqa: F811
    root = archive.root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "cases"], check=True)
    done = invoke("replay", "--archive", str(root), "--python", "t", "--commit", "--no-record")
    assert done.exit_code == 0, done.output
    assert all(len(archive.load(case_id).replays) == 1 for case_id in archive.ids())
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    assert ".casekit.lock" not in status  # the archive's .gitignore keeps the lock out
    assert status.strip() in ("", "?? .gitignore")


def test_the_lock_is_ignored_by_a_gitignore_casekit_writes_and_keeps_the_users_lines(tmp_path: Path):
    store = Archive(tmp_path / "cases")
    store.root.mkdir()
    (store.root / ".gitignore").write_text("*.bak")  # the user's, without a final newline
    with store.locked():
        pass
    with store.locked():  # idempotent
        pass
    assert (store.root / ".gitignore").read_text().splitlines() == ["*.bak", ".casekit.lock", ".casekit/"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    ignored = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "cases/.casekit.lock"], capture_output=True, text=True
    )
    assert ignored.returncode == 0


def test_a_draft_named_with_case_is_skipped_as_in_a_whole_archive_run(archive: Archive, served: None):  # noqa: F811
    case = archive.load("breaks")
    case.tags.append("draft")
    archive.save(case)
    whole = invoke("replay", "--archive", str(archive.root), "--python", "t")
    named = invoke(
        "replay", "--archive", str(archive.root), "--python", "t", "--case", "breaks", "--case", "data-branch"
    )
    for done in (whole, named):
        assert "skipping 1 draft case(s) without a repro: breaks" in done.stderr
        assert "skipped breaks: a draft without a repro" in done.stdout
        assert not any(line.startswith("breaks ") for line in done.stdout.splitlines())
    only = invoke("replay", "--archive", str(archive.root), "--python", "t", "--case", "breaks")
    # main() turns a CasekitError into one line and exit 2 (CliRunner calls the app below main)
    assert isinstance(only.exception, CasekitError)
    assert str(only.exception).startswith("nothing to replay: breaks is a draft without a repro")
    assert "regressed" not in only.output


# ------------------------------------------------------------------ one JSON convention


def test_json_dash_puts_the_document_alone_on_stdout(archive: Archive, served: None, tmp_path: Path):  # noqa: F811
    done = invoke("replay", "--archive", str(archive.root), "--python", "t", "--json", "-")
    document = json.loads(done.stdout)
    assert document["schema"] == "casekit.replay/1" and len(document["results"]) == 5
    assert "case            verdict" in done.stderr  # the table went to stderr
    saved = tmp_path / "replay.json"
    saved.write_text(done.stdout)
    merged = invoke("merge", str(saved), "--json", "-")
    assert json.loads(merged.stdout)["schema"] == "casekit.replay/1"
    shown = invoke("show", "breaks", "--archive", str(archive.root), "--json", "-")
    case = json.loads(shown.stdout)
    assert case["schema"] == "casekit.case/1" and "schema_version" not in case and case["id"] == "breaks"
    written = invoke("show", "breaks", "--archive", str(archive.root), "--json", str(tmp_path / "case.json"))
    assert written.exit_code == 0 and json.loads((tmp_path / "case.json").read_text())["id"] == "breaks"


# ------------------------------------------------------------------ did-you-mean, tables, wording


def test_a_mistyped_id_gets_the_nearest_one(archive: Archive):  # noqa: F811
    with pytest.raises(CaseNotFound, match=r"no case 'deepcopy-stat' in .*; did you mean 'deepcopy-state'\?"):
        archive.load("deepcopy-stat")
    with pytest.raises(CaseNotFound, match=r"no case 'zzz' in .* \(cases: breaks, data-branch, "):
        archive.load("zzz")
    done = invoke("repaly")
    assert done.exit_code == 2 and "Did you mean 'replay'?" in done.output
    flag = invoke("replay", "--recrod")
    assert flag.exit_code == 2 and "--record" in flag.output


def test_a_table_fits_the_terminal_by_cutting_the_title_with_an_ellipsis():
    rows = [["item-branch", "A data-dependent branch on .item() inside a compiled step", "starter", "1"]]
    wide = table(["id", "title", "tags", "breaks"], rows)
    narrow = table(["id", "title", "tags", "breaks"], rows, width=50, squeeze=1)
    assert max(len(line) for line in narrow.splitlines()) <= 50 < max(len(line) for line in wide.splitlines())
    assert "  A data-dependent br\u2026  starter" in narrow and "\u2026" not in wide


def test_a_resume_function_falling_back_is_not_the_whole_function():
    resume = describe_fallback("torch_dynamo_resume_in_step_at_8", "repro.py:8")
    assert resume.startswith("the code after the break at line 8 in step runs eagerly")
    assert "step now falls back to eager entirely" not in resume
    assert describe_fallback("step", "repro.py:6") == "step (repro.py:6) now falls back to eager entirely"


def test_a_target_is_labelled_with_the_exact_build_it_ran(archive: Archive, monkeypatch: pytest.MonkeyPatch):  # noqa: F811
    """The runner knows the version it asked for (2.5.1); the probe saw the build (2.5.1+cu124): the build wins."""
    from .fakes import RecordedRunner

    class Asked(RecordedRunner):
        def run_probe(self, jobs, progress):  # type: ignore[no-untyped-def]
            batch = super().run_probe(jobs, progress)
            batch.environment["torch"] = "2.5.1+cu124"
            return batch

        def describe(self) -> dict[str, object]:
            return {**super().describe(), "torch": "2.5.1", "env_key": "torch-2.5.1-cu124"}

    log: list = []
    monkeypatch.setattr(replay_command, "default_runner_factory", lambda spec: Asked(spec, Target("2.5.1"), log))
    done = invoke("replay", "--archive", str(archive.root), "--python", "t", "--json", "-")
    assert json.loads(done.stdout)["targets"][0]["torch"] == "2.5.1+cu124"
    assert "target python:t: torch 2.5.1+cu124, python 3.11.7" in done.stderr


def test_bisect_json_dash_puts_the_document_alone_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same --json convention as replay, merge and show: '-' is stdout, the report text goes to stderr."""
    from casekit.bisect import releases

    from .test_bisect_releases_fast import HISTORY, VERSIONS, FakeReplay, make_case

    Archive(tmp_path / "cases").save(make_case())
    monkeypatch.setattr(releases, "run_target", FakeReplay(HISTORY))
    args = ["bisect", "item-case", "--good", "2.5.1", "--bad", "2.10.0", "--versions", ",".join(VERSIONS)]
    done = invoke(*args, "--archive", str(tmp_path / "cases"), "--cache", str(tmp_path / "c.json"), "--json", "-")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["schema"], report["first_bad"]) == ("casekit.bisect/1", "2.8.0")
    assert "step 3, ~3 left: trying 2.8.0" in done.stderr
