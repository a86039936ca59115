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
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import casekit.cli.replay as replay_command
from casekit.archive.store import Archive
from casekit.cli import app
from casekit.errors import CasekitError, CaseNotFound
from casekit.progress import ProgressView, Verbosity, fit_label, plain_output, set_verbosity, shorten_paths
from casekit.report.text import describe_fallback, table

from .fakes import Target, captured_archive, recorded_targets

PLAIN = {"NO_COLOR": "1", "COLUMNS": "80", "TERM": "dumb"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="casekit", env=PLAIN)


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    return captured_archive(tmp_path / "cases")


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


LONG = "python:/home/alice/envs/team/experiments/2026/nightly-build-with-debug/bin/python"


def test_a_long_label_does_not_wrap_a_terminals_progress_lines(monkeypatch: pytest.MonkeyPatch):
    """Each line fits the terminal: the label keeps its kind and its end; a log keeps every line whole."""
    monkeypatch.setenv("COLUMNS", "72")
    monkeypatch.setenv("NO_COLOR", "1")  # plain lines, on a terminal
    terminal = Terminal()
    with ProgressView.for_stderr(terminal) as view:
        view(f"[{LONG}] running 18 script(s) of 9 case(s)")
        view(f"[{LONG}] 3/18 item-branch.pre done (eager ok, compiled ok)")
    lines = terminal.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 72 for line in lines), lines
    assert lines[0].startswith("  ... [python:…") and "/bin/python] running 18 script(s) of 9 case(s)" in lines[0]
    log = io.StringIO()
    with ProgressView.for_stderr(log) as view:
        view(f"[{LONG}] running 18 script(s) of {'9 case(s) ' * 12}")
    # not a terminal: not cut to a width, but a path is named by what a person needs (its last three parts)
    assert (
        log.getvalue()
        == f"  ... [python:…/nightly-build-with-debug/bin/python] running 18 script(s) of {'9 case(s) ' * 12}\n"
    )
    set_verbosity(Verbosity.VERBOSE)
    whole = io.StringIO()
    with ProgressView.for_stderr(whole) as view:
        view(f"[{LONG}] running 18 script(s) of 9 case(s)")
    assert whole.getvalue() == f"  ... [{LONG}] running 18 script(s) of 9 case(s)\n"  # -v: every path whole


def test_a_progress_line_names_a_path_by_what_a_person_needs() -> None:
    """Not the temporary or cache folder around it: the home folder as ~, elsewhere the last three parts."""
    home = "/home/alice"
    env = "/tmp/pytest-of-alice/pytest-12/test_x0/cache/envs/torch-2.13.0-py3.11-2fb6f524/bin/python"
    said = shorten_paths(f"[venv:torch-2.13] warm probe started for replay in {env} (pid 7): importing torch …", home)
    assert (
        said
        == "[venv:torch-2.13] warm probe started for replay in …/torch-2.13.0-py3.11-2fb6f524/bin/python (pid 7): importing torch …"
    )
    assert shorten_paths(
        "[python:/home/alice/envs/nightly/bin/python] checking torch in /home/alice/envs/nightly/bin/python …", home
    ) == ("[python:~/envs/nightly/bin/python] checking torch in ~/envs/nightly/bin/python …")
    kept = "cannot reach https://download.pytorch.org/whl/cpu/torch/: --find-links /opt/wheels, in /usr/bin/python3"
    assert shorten_paths(kept, home) == kept  # a URL, and a path of three parts or fewer, say what they say
    assert shorten_paths("a/b/c/d/e.py x=/srv/a/b/c/d.py", home) == "a/b/c/d/e.py x=…/b/c/d.py"


def test_two_interpreters_cut_on_a_terminal_stay_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--python` paths alike at both ends: the cut keeps the part that tells them apart, in lines and bars."""
    first = "python:/opt/team/envs/torch-2.5-debug/bin/python"
    second = "python:/opt/team/envs/torch-2.13-debug/bin/python"
    assert fit_label(first, 24, [second]) != fit_label(second, 24, [first])
    assert "2.5" in fit_label(first, 24, [second]) and "2.13" in fit_label(second, 24, [first])
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("NO_COLOR", "1")
    set_verbosity(Verbosity.VERBOSE)  # whole paths: the labels are as long as a user's can be
    terminal = Terminal()
    with ProgressView.for_stderr(terminal) as view:
        for label in (first, second):
            view(f"[{label}] running 18 script(s) of 9 case(s), importing torch and warming Dynamo up")
    one, two = terminal.getvalue().splitlines()
    assert len(one) <= 60 and len(two) <= 60
    assert one.split("]")[0] != two.split("]")[0], (one, two)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    bars = Terminal()
    with ProgressView.for_stderr(bars) as view:
        view(f"[{first}] 1/4 a.pre done")
        view(f"[{second}] 1/4 a.pre done")
        assert view._bars is not None
        names = [task.description for task in view._bars.tasks]
    assert len(set(names)) == 2 and "2.5" in names[0] and "2.13" in names[1], names


def test_a_long_label_names_a_bar_that_fits(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "72")
    terminal = Terminal()
    with ProgressView.for_stderr(terminal) as view:
        view(f"[{LONG}] 1/4 a.pre done")
        assert view._bars is not None
        shown = view._bars.tasks[-1].description
        assert len(shown) <= 24 and shown.startswith("python:…") and shown.endswith("/bin/python")
        view(f"[{LONG}] a line said beside the bars, far longer than the terminal is wide, many words")
    assert all(len(line) <= 72 for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue()).splitlines())


def test_a_phase_on_a_terminal_counts_its_elapsed_time_and_prints_what_it_took(monkeypatch: pytest.MonkeyPatch):
    """Importing torch, building an env, verifying rollbacks: a message ending in "…" stays on screen with
    its elapsed time until its label says the next thing, then is printed once with the seconds it took."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for the whole line (a narrower terminal cuts the message)
    terminal = Terminal()
    with ProgressView.for_stderr(terminal) as view:
        view("[venv:torch-2.5.1] probe started in /x/python (pid 1): importing torch, warming Dynamo up …")
        (live,) = [task for task in view._bars.tasks if "importing torch" in task.description]  # type: ignore[union-attr]
        assert live.total is None and "[venv:torch-2.5.1]" in live.description  # a label, not rich markup
        view("[other] 1/2 a.pre done")  # another target's progress leaves this phase running
        assert "venv:torch-2.5.1" in view._phases
        time.sleep(2.1)
        assert live.elapsed is not None and live.elapsed >= 2.0  # what the elapsed column shows
        view("[venv:torch-2.5.1]   uv: tool output")  # tool output belongs to the phase
        assert "venv:torch-2.5.1" in view._phases
        view("[venv:torch-2.5.1] torch 2.5.1 imported in 2.1 s")
        assert "venv:torch-2.5.1" not in view._phases and live.id not in view._bars.task_ids  # type: ignore[union-attr]
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    assert re.search(r"importing torch, warming\s+Dynamo up … 2\.\d s\n", shown), shown[-800:]  # (may wrap)


def test_a_phase_off_a_terminal_is_one_line():
    stream = io.StringIO()
    view = ProgressView(stream, plain=True)
    view("[t] installing torch==2.5.1 numpy with uv (this can take minutes) …")
    view("[t]   uv: Resolved 12 packages")
    view("[t] verifying rollback for 1 case(s) with fullgraph=False …")
    view("[t] 1/1 a.post.rollback done")
    view.stop()
    assert stream.getvalue().splitlines() == [
        "  ... [t] installing torch==2.5.1 numpy with uv (this can take minutes) …",
        "  ... [t] verifying rollback for 1 case(s) with fullgraph=False …",
        "  ... [t] 1/1 a.post.rollback done",
    ]
    assert "\x1b" not in stream.getvalue()


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


@pytest.mark.process
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


@pytest.mark.process
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
        said = (done.stdout + done.stderr).splitlines()
        assert len([line for line in said if "draft" in line]) == 1, said  # said once, not again after the report
        assert "skipping 1 draft case(s) without a repro: breaks (capture one with" in done.stderr
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

    from .bisect_fakes import HISTORY, VERSIONS, FakeReplay, make_case

    Archive(tmp_path / "cases").save(make_case())
    monkeypatch.setattr(releases, "run_target", FakeReplay(HISTORY))
    args = ["bisect", "item-case", "--good", "2.5.1", "--bad", "2.10.0", "--versions", ",".join(VERSIONS)]
    done = invoke(*args, "--archive", str(tmp_path / "cases"), "--cache", str(tmp_path / "c.json"), "--json", "-")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["schema"], report["first_bad"]) == ("casekit.bisect/1", "2.8.0")
    assert "step 3, ~3 left: trying 2.8.0" in done.stderr


def test_did_you_mean_finds_what_a_person_half_remembers(tmp_path: Path):
    from casekit.archive.store import suggestions

    known = ["item-branch", "tensor-if", "deepcopy-state", "numpy-tolist", "print-in-forward", "logging-in-forward"]
    assert suggestions("deepcopy-stat", known) == ["deepcopy-state"]  # a near typo, as before
    assert suggestions("item", known) == ["item-branch"]  # the start of an id
    assert suggestions("tolist", known) == ["numpy-tolist"]  # a part of it
    assert set(suggestions("forward", known)) == {"print-in-forward", "logging-in-forward"}
    assert suggestions("state-deepcopy", known) == ["deepcopy-state"]  # its words, in another order
    assert suggestions("zzz", known) == []
    cases = Archive(tmp_path / "cases")
    cases.root.mkdir()
    for case_id in known:
        (cases.root / f"{case_id}.toml").write_text("")
    with pytest.raises(CaseNotFound, match=r"no case 'tolist' in .*; did you mean 'numpy-tolist'\?"):
        cases.load("tolist")


def test_a_default_case_id_from_a_long_title_is_short():
    from casekit.bundle import case_id_from_title

    title = "LlamaRotaryEmbedding.forward gets an unexpected keyword argument hidden_states under compile"
    assert case_id_from_title(title) == "llamarotaryembedding-forward"
    assert case_id_from_title("item() branch in step") == "item-branch-step"
    assert case_id_from_title("deepcopy of the optimizer state") == "deepcopy-optimizer-state"
    assert case_id_from_title("the of") == "the-of"  # only filler words: kept rather than nothing
    for long in (title, "x" * 200, "a " * 50 + "b"):
        assert 0 < len(case_id_from_title(long)) <= 32


def test_a_phase_on_a_narrow_terminal_fits_and_keeps_what_it_took(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "60")
    terminal = Terminal()
    with ProgressView.for_stderr(terminal) as view:
        view(f"[{LONG}] probe started in /x/python (pid 1): importing torch, warming Dynamo up …")
        view(f"[{LONG}] torch 2.13.0 imported in 0.1 s")
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue()).splitlines()
    closed = [line for line in lines if "warming" in line or line.rstrip().endswith(" s")]
    assert closed and all(len(line.rstrip()) <= 60 for line in lines), lines
    assert any(re.search(r"… \d+\.\d s$", line.rstrip()) for line in closed), closed


def test_merge_counts_the_files_it_read_not_its_arguments(archive: Archive, tmp_path: Path):  # noqa: F811
    """One folder argument holding four shard files, one of them an earlier attempt the merge left out."""
    from casekit.replay.plan import ReplayRequest, TargetChoice, run_replay
    from casekit.replay.run import ReplayOptions

    _, factory, _ = recorded_targets({"a": Target("2.13.0"), "b": Target("2.5.1")})
    folder = tmp_path / "results"
    for shard in ("1/2", "2/2", "2/2"):  # shard 2 retried: its second attempt replaces its files
        request = ReplayRequest(
            targets=TargetChoice(pythons=("a", "b")),
            shard=shard,
            results_dir=folder,
            options=ReplayOptions(record=False),
        )
        run_replay(request, archive, factory, lambda message: None)
    files = sorted(folder.rglob("*.json"))
    done = invoke("merge", str(folder))
    assert f"10 result(s) from {len(files)} file(s);" in done.output, done.output
    earlier = tmp_path / "earlier"
    for path in files:  # an earlier attempt of every file, kept in a second folder: read, then left out
        copy = earlier / path.parent.name / path.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(path.read_text())
        copy.write_text(json.dumps({**data, "attempt": 1, "written": "2000-01-01T00:00:00+00:00"}))
    done = invoke("merge", str(folder), str(earlier))
    n = len(files)
    assert f"10 result(s) from {2 * n} file(s) ({n} earlier attempt(s) left out);" in done.output, done.output
