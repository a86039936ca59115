"""Replay policy in-process, in milliseconds: a fake runner serves probe results recorded on real torch.

What is faked is only the Runner interface (tests/fakes.py); capture, classification,
rollback verification, history, sharding, the JSON document and the exit code are
the real code. test_replay.py and test_shard.py run the same paths on real torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.errors import CasekitError
from casekit.model import SITE_CLASS_ORDER, ScriptRole, Severity, SiteClass, Verdict
from casekit.outcome import ExitCode, FailOn, check_seconds, exit_code
from casekit.replay.document import Matrix, parse_replay_document, read_replay_document
from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
from casekit.replay.run import ReplayOptions
from casekit.replay.shard import merge_reports, without_volatile

from .conftest import run_casekit
from .fakes import FIXTURE_SCRIPTS, Target, captured_archive, recorded_targets

quiet = lambda message: None  # noqa: E731


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    return captured_archive(tmp_path / "cases")


def request_for(names: list[str], **kwargs: object) -> ReplayRequest:
    return ReplayRequest(targets=TargetChoice(pythons=tuple(names)), **kwargs)  # type: ignore[arg-type]


def test_a_break_that_moved_below_the_same_line_is_moved_and_the_rest_persist(archive: Archive) -> None:
    specs, factory, _ = recorded_targets({"t-2.13.0": Target("2.13.0")})
    outcome = run_replay(request_for(["t-2.13.0"], fail_on=FailOn.ERROR), archive, factory, quiet)
    results = {r.case: r for r in outcome.document.results}
    assert [s.site_class for s in results["deepcopy-state"].scripts[ScriptRole.PRE].sites] == [SiteClass.MOVED]
    pre_breaks = results["breaks"].scripts[ScriptRole.PRE].sites
    assert {s.site_class for s in pre_breaks} == {SiteClass.PERSISTS}  # reworded, same breaks
    assert outcome.worst is Severity.WARN and outcome.exit_code is ExitCode.OK
    written = json.loads(json.dumps(outcome.document.to_json()))
    assert parse_replay_document(written, "<written>") == outcome.document  # the writer's output validates, reads back
    history = archive.load("deepcopy-state").replays
    assert [(r.verdict, r.sites[0].site_class, r.sites[0].script) for r in history] == [
        (Verdict.CHANGED, SiteClass.MOVED, ScriptRole.PRE)
    ]


def test_fail_on_warn_fails_the_same_replay(archive: Archive) -> None:
    _, factory, _ = recorded_targets({"t-2.13.0": Target("2.13.0")})
    request = request_for(["t-2.13.0"], fail_on=FailOn.WARN, options=ReplayOptions(record=False))
    assert run_replay(request, archive, factory, quiet).exit_code is ExitCode.FAILED


def test_a_broken_fix_is_an_error_and_its_rollback_is_verified(archive: Archive) -> None:
    # the post-fix script now behaves like the repro: its breaks are back
    _, factory, log = recorded_targets({"t": Target("2.13.0", serve_as={"deepcopy_state": "breaks"})})
    request = request_for(["t"], case_ids=("fixcase",), options=ReplayOptions(record=False))
    outcome = run_replay(request, archive, factory, quiet)
    [result] = outcome.document.results
    assert (result.verdict, result.severity) == (Verdict.FIX_BROKEN, Severity.ERROR)
    rollback = result.rollback
    assert rollback is not None and rollback.needed and rollback.verified is True
    assert rollback.path == "post-fix with fullgraph=False" and rollback.notes == "go back to fullgraph=False"
    assert [job.modes for _, job in log if job.id.endswith(".rollback")] == [("eager", "rollback")] * 2
    assert outcome.exit_code is ExitCode.FAILED


def test_a_failed_environment_is_exit_2_from_replay_and_from_merge(archive: Archive, tmp_path: Path) -> None:
    _, factory, _ = recorded_targets({"ok": Target("2.13.0"), "broken": Target("2.13.0", prepare_error="no wheel")})
    out = tmp_path / "replay.json"
    request = request_for(["ok", "broken"], fail_on=FailOn.NEVER, json_out=out, options=ReplayOptions(record=False))
    outcome = run_replay(request, archive, factory, quiet)
    assert outcome.exit_code is ExitCode.PROBLEM
    assert outcome.failed_targets == ["python:broken: no wheel"]
    broken = [r for r in outcome.document.results if r.target == "python:broken"]
    assert {r.verdict for r in broken} == {Verdict.ENV_FAILED}
    assert merge_reports([out]).exit_code(FailOn.NEVER) is ExitCode.PROBLEM  # the same file, the same answer
    assert merge_reports([out]).exit_code(FailOn.ERROR) is outcome.exit_code
    assert archive.load("breaks").replays == []  # --no-record


def test_the_exit_policy() -> None:
    assert exit_code(Severity.ERROR, FailOn.ERROR) is ExitCode.FAILED
    assert exit_code(Severity.WARN, FailOn.ERROR) is ExitCode.OK
    assert exit_code(Severity.INFO, FailOn.INFO) is ExitCode.FAILED
    assert exit_code(Severity.ERROR, FailOn.NEVER) is ExitCode.OK
    assert exit_code(Severity.INFO, FailOn.NEVER, problems=1) is ExitCode.PROBLEM
    with pytest.raises(CasekitError, match="--fail-on must be error, warn, info or never, not 'sometimes'"):
        exit_code(Severity.INFO, "sometimes")


def test_shards_merged_equal_the_unsharded_replay(archive: Archive, tmp_path: Path) -> None:
    names = ["a-2.13.0", "b-2.5.1"]
    _, factory, _ = recorded_targets({"a-2.13.0": Target("2.13.0"), "b-2.5.1": Target("2.5.1")})
    options = ReplayOptions(record=False)
    whole = run_replay(request_for(names, options=options, json_out=tmp_path / "whole.json"), archive, factory, quiet)
    paths = []
    for k in (1, 2, 3):
        path = tmp_path / "shards" / f"{k}.json"
        run_replay(request_for(names, options=options, shard=f"{k}/3", json_out=path), archive, factory, quiet)
        paths.append(path)
    counts = sorted(len(read_replay_document(p).results) for p in paths)
    assert sum(counts) == 10 and counts == [2, 3, 5]  # one whole target, the other's cases split in two
    merged = merge_reports(paths)
    assert without_volatile(merged.data) == without_volatile(whole.document)
    assert merged.exit_code(FailOn.ERROR) is whole.exit_code


def test_an_empty_shard_writes_its_document_into_new_folders(archive: Archive, tmp_path: Path) -> None:
    _, factory, log = recorded_targets({"t": Target("2.13.0")})
    out = tmp_path / "new" / "dir" / "r.json"
    request = request_for(["t"], case_ids=("breaks",), shard="2/2", json_out=out)
    outcome = run_replay(request, archive, factory, quiet)
    assert outcome.report is None and outcome.exit_code is ExitCode.OK and log == []
    document = read_replay_document(out)
    assert document.results == [] and document.shard == "2/2"
    assert document.matrix == Matrix(cases=["breaks"], targets=["python:t"])
    assert not list(out.parent.glob(".*.tmp"))  # written atomically: no temporary file left


def test_drafts_are_skipped_and_invalid_bundles_reported_not_fatal(archive: Archive) -> None:
    draft = archive.load("module-skip")
    draft.tags.append("draft")
    archive.save(draft)
    (archive.root / "broken.toml").write_text("schema_version = 1\nid = 5\n")
    _, factory, _ = recorded_targets({"t": Target("2.5.1")})
    notices: list[str] = []
    options = ReplayOptions(record=False)
    outcome = run_replay(request_for(["t"], options=options), archive, factory, quiet, notices.append)
    assert outcome.skipped_drafts == ["module-skip"]
    assert [str(e) for e in outcome.invalid] == [
        f"{archive.root / 'broken.toml'}: field 'scripts.pre': missing: a bundle embeds at least the pre-fix script"
    ]
    assert any(line.startswith("invalid bundle: ") for line in notices)
    assert sorted(r.case for r in outcome.document.results) == [
        "breaks",
        "data-branch",
        "deepcopy-state",
        "fixcase",
    ]
    assert outcome.exit_code is ExitCode.PROBLEM  # a CI job sees it
    allowed = run_replay(request_for(["t"], options=options, allow_invalid=True), archive, factory, quiet)
    assert allowed.exit_code is ExitCode.OK


def test_nothing_to_replay_is_a_problem_unless_it_is_an_empty_shard(tmp_path: Path) -> None:
    empty = Archive(tmp_path / "empty")
    empty.root.mkdir()
    _, factory, _ = recorded_targets({"t": Target("2.13.0")})
    with pytest.raises(CasekitError, match="holds no cases to replay"):
        run_replay(request_for(["t"]), empty, factory, quiet)
    assert run_replay(request_for(["t"], shard="1/2"), empty, factory, quiet).exit_code is ExitCode.OK
    with pytest.raises(CasekitError, match="is a folder"):
        request_for(["t"], json_out=tmp_path)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_a_timeout_must_be_finite_and_positive(value: float) -> None:
    with pytest.raises(CasekitError, match="--timeout must be a finite number of seconds greater than 0"):
        ReplayOptions(timeout=value)
    with pytest.raises(CasekitError):
        check_seconds("--timeout", value)
    assert ReplayOptions(timeout=0.5).timeout == 0.5


def test_bad_flags_are_one_line_from_the_core() -> None:
    with pytest.raises(CasekitError, match="--shard takes K/N"):
        ReplayRequest(shard="half")
    with pytest.raises(CasekitError, match="--allow takes KEY=VALUE"):
        TargetChoice(torches=("2.13",), runner="docker", allow=("network",)).specs()
    with pytest.raises(CasekitError, match="--runner must be one of"):
        TargetChoice(torches=("2.13",), runner="conda").specs()


# ------------------------------------------------- through the real command line (no torch is started)


@pytest.mark.process
@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_cli_timeout_flags_are_one_clear_line(value: str, tmp_path: Path) -> None:
    # a replay flag is a usage error (2); capture refuses the case (1, as every failed capture gate)
    for command, code in (
        (["replay", "--archive", str(tmp_path)], 2),
        (["capture", str(FIXTURE_SCRIPTS / "breaks.py")], 1),
    ):
        done = run_casekit(*command, "--timeout", value, cwd=tmp_path, timeout=120)
        assert done.returncode == code
        assert done.stderr.strip().splitlines() == [
            f"casekit: error: --timeout must be a finite number of seconds greater than 0, not {float(value)!r}"
        ]


@pytest.mark.process
def test_cli_empty_shard_into_missing_folders(archive: Archive, tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir" / "r.json"
    done = run_casekit(
        "replay", "--archive", str(archive.root), "--case", "breaks", "--shard", "2/2", "--json", str(out), timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "shard 2/2: nothing to run" in done.stdout
    assert json.loads(out.read_text())["shard"] == "2/2"


@pytest.mark.process
def test_cli_list_and_report_go_on_past_an_invalid_bundle(archive: Archive, tmp_path: Path) -> None:
    (archive.root / "broken.toml").write_text("not toml [")
    listed = run_casekit("list", "--archive", str(archive.root), timeout=120)
    assert listed.returncode == 2
    assert "breaks" in listed.stdout and "fixcase" in listed.stdout
    assert [line for line in listed.stderr.splitlines()] == [
        f"casekit: invalid bundle: {archive.root / 'broken.toml'}: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 5)"
    ]
    out = tmp_path / "report"
    reported = run_casekit("report", "--archive", str(archive.root), "--format", "json", "--out", str(out))
    assert reported.returncode == 2 and "Traceback" not in reported.stderr
    assert len(json.loads((out / "report.json").read_text())["cases"]) == 5


def test_the_replay_command_renders_the_outcome(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command only parses, calls run_replay and renders: site classes in canonical order, exit code as decided."""
    from typer.testing import CliRunner

    import casekit.cli.replay as replay_command
    from casekit.cli import app

    _, factory, _ = recorded_targets({"t": Target("2.13.0", serve_as={"deepcopy_state": "breaks"})})
    monkeypatch.setattr(replay_command, "default_runner_factory", factory)
    args = ["replay", "--archive", str(archive.root), "--python", "t", "--case", "fixcase", "--no-record"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 1, done.output
    [row] = [line for line in done.stdout.splitlines() if line.startswith("fixcase ") and " on " not in line]
    assert row.split()[1:4] == ["fix_broken", "error", "pre:ok/post:ok"]
    # attention first (new, reappeared, moved, gone, persists, unobserved), never alphabetical
    shown = [part.split()[1] for part in row.split("  ")[-1].split(", ")]
    order = [str(c) for c in SITE_CLASS_ORDER]
    assert shown == sorted(shown, key=order.index) and "reappeared" in shown
    assert "why: post-fix breaks again at deepcopy_state.py:6" in done.stdout
    assert "rollback (verified): post-fix with fullgraph=False runs and matches eager" in done.stdout


def test_a_target_label_in_the_bundle_history_names_no_folder_of_this_machine() -> None:
    import os
    import sys

    from casekit.runners import registry

    def python(path: str | None) -> tuple[str, str]:
        spec = registry.interpreter_runner().target(python=path)
        return registry.label(spec), registry.display(spec)

    label, shown = python(sys.executable)
    assert label.startswith("python:<python>/") and shown == f"python:{sys.executable}"
    home = os.path.expanduser("~")
    # under the home folder too, only the last three parts: no home-relative layout in a shared bundle
    assert python(f"{home}/envs/nightly/bin/python")[0] == "python:…/nightly/bin/python"
    managed = f"{home}/.cache/casekit/envs/torch-2.5.1-py3.11-6c036d11/bin/python"
    assert python(managed)[0] == "python:…/torch-2.5.1-py3.11-6c036d11/bin/python"
    assert "~" not in python("~/envs/nightly/bin/python")[0]
    # a folder of the user's that merely starts with "casekit-" is no batch folder: the label keeps it whole
    assert python(f"{home}/envs/casekit-nightly/bin/python") == (
        "python:…/casekit-nightly/bin/python",
        f"python:{home}/envs/casekit-nightly/bin/python",
    )
    assert python("/opt/team/envs/nightly/bin/python")[0] == "python:…/nightly/bin/python"
    assert python(None) == ("python:current", "python:current")
    assert registry.label(registry.runner_class("venv").target(torch="2.13")) == "venv:torch-2.13"


def test_two_interpreters_one_label_are_refused_before_anything_runs() -> None:
    choice = TargetChoice(pythons=("/opt/a/envs/nightly/bin/python", "/opt/b/envs/nightly/bin/python"))
    with pytest.raises(CasekitError, match=r"would both be recorded as python:…/nightly/bin/python"):
        choice.specs()


def test_a_broken_fix_says_why_once_and_its_rollback_says_the_way_back(archive: Archive) -> None:
    """The verdict's reason names the break that is back; the rollback line proves the way back, without
    repeating it, in the terminal and in every report's cell (which reads the same document)."""
    from casekit.report.summary import cells_from_results
    from casekit.report.text import result_text

    _, factory, _ = recorded_targets({"t": Target("2.13.0", serve_as={"deepcopy_state": "breaks"})})
    request = request_for(["t"], case_ids=("fixcase",), options=ReplayOptions(record=False))
    [result] = run_replay(request, archive, factory, quiet).document.results
    [why] = [reason for reason in result.reasons if reason.startswith("post-fix breaks again at ")]
    text = result_text(result)
    assert text.count(why) == 1, text
    assert "  rollback (verified): post-fix with fullgraph=False runs and matches eager" in text
    [cell] = cells_from_results(_document_of(result), "r.json")
    assert sum(detail.count(why) for detail in cell.details) == 1, cell.details
    assert any(detail.startswith("rollback (verified): post-fix with fullgraph=False") for detail in cell.details)


def _document_of(result):  # type: ignore[no-untyped-def]
    from casekit.replay.document import ReplayDocument, TargetEntry

    return ReplayDocument([TargetEntry(result.target, torch="2.13.0")], [result])
