"""`casekit bisect` and `casekit bisect-commits` through the command line.

The fast tests drive `bisect` with `run_target` faked at its interface (see
test_bisect_run.py). The slow ones are real: a bisection between two torch
releases installed here (2.5.1 and this interpreter's torch) over a case
captured for real, and a commit bisection of a generated git history where
one commit adds a print() inside a compiled function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bisect import releases
from casekit.bisect.plan import parse_python_for
from casekit.errors import BisectError, CasekitError
from casekit.scrub import portable_paths
from tests.bisect_fakes import HISTORY, VERSIONS, FakeReplay, invoke, make_case
from tests.gitrepo import git, make_dirty, snapshot

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "versions"


@pytest.fixture
def fake_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    archive = tmp_path / "cases"
    Archive(archive).save(make_case())
    monkeypatch.setattr(releases, "run_target", FakeReplay(HISTORY))
    return archive


def test_bisect_prints_progress_and_the_final_report(tmp_path: Path, fake_archive: Path) -> None:
    args = [
        "bisect",
        "item-case",
        "--good",
        "2.5.1",
        "--bad",
        "2.10.0",
        "--versions",
        ",".join(VERSIONS),
        "--archive",
        fake_archive,
        "--cache",
        tmp_path / "cache.json",
        "--json",
        tmp_path / "report.json",
    ]
    code, output, error = invoke(*args)
    assert code == 0, (output, error)
    assert "step 1, ~5 left: checking the good end 2.5.1" in output
    assert "step 2, ~4 left: checking the bad end 2.10.0" in output
    assert "step 3, ~3 left: trying 2.8.0" in output and "step 4, ~2 left: trying 2.7.1" in output
    assert "4 step(s): 4 run, 0 from the cache" in output
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["schema"], report["first_bad"]) == ("casekit.bisect/1", "2.8.0")

    assert "regression in 2.8.0" in output and "what changed from 2.5.1 (good end) to 2.8.0:" in output
    # the transcripts of the report itself: tests/test_bisect_golden.py


def test_ends_that_agree_are_an_answer_with_exit_0(tmp_path: Path, fake_archive: Path) -> None:
    code, output, error = invoke(
        "bisect",
        "item-case",
        "--good",
        "2.5.1",
        "--bad",
        "2.7.1",
        "--versions",
        "2.5.1,2.6.0,2.7.1",
        "--archive",
        fake_archive,
        "--no-cache",
        "--json",
        tmp_path / "r.json",
    )
    assert code == 0, (output, error)
    assert "nothing changed between 2.5.1 and 2.7.1: both give 'unchanged'" in output
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["first_bad"], report["result"], report["exact"]) == (None, "nothing_changed", False)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--site", "repro.py:5", "--post-holds"], "choose one of --site, --status and --post-holds"),
        (["--python-for", "2.5.1"], "VERSION=PATH"),
        (["--python-for", "2.5.1=/p/python", "--runner", "venv"], "for --runner python"),
        (["--status", "mid"], "pre or post"),
        (["--site", "repro.py"], "FILE:LINE"),
    ],
)
def test_bad_options_are_casekit_errors(fake_archive: Path, extra: list[str], message: str) -> None:
    code, _, error = invoke(
        "bisect",
        "item-case",
        "--good",
        "2.5.1",
        "--bad",
        "2.10.0",
        "--versions",
        "2.5.1,2.10.0",
        "--archive",
        fake_archive,
        "--no-cache",
        *extra,
    )
    assert code != 0 and isinstance(error, CasekitError) and message in str(error), error


def test_parse_python_for() -> None:
    assert parse_python_for(["2.5.1=/a/python", " 2.13.0 = /b/python "]) == {
        "2.5.1": "/a/python",
        "2.13.0": "/b/python",
    }
    with pytest.raises(BisectError):
        parse_python_for(["=/a/python"])


# ------------------------------------------------------------------ real torch


def torch_251_python() -> str:
    """An interpreter with torch 2.5.1: a managed env if casekit has one, /tmp/venv251, else build the env."""
    from casekit.runners.interface import TargetSpec
    from casekit.runners.venv import VenvRunner, list_envs

    for env in list_envs():
        if env.complete and (env.torch or "").split("+")[0] == "2.5.1" and env.python_executable.exists():
            return str(env.python_executable)
    if Path("/tmp/venv251/bin/python").exists():
        return "/tmp/venv251/bin/python"
    runner = VenvRunner(TargetSpec(runner="venv", torch="2.5.1"))
    try:
        runner.prepare(lambda message: None)
    except CasekitError as error:
        pytest.fail(f"no torch 2.5.1 interpreter found, and the managed env could not be built: {error}")
    assert runner.env is not None
    return str(runner.env.python_executable)


@pytest.mark.slow
@pytest.mark.torch251
def test_real_bisection_between_torch_releases_resumes_from_cache(tmp_path: Path) -> None:
    """The torch.cond fix with an identity branch runs on 2.5.1 and fails on 2.13.0 (BRIEF: measured here)."""
    from casekit.capture import CaptureRequest, capture
    from casekit.runners.interface import TargetSpec
    from casekit.runners.registry import make_runner

    old_python = torch_251_python()
    archive = tmp_path / "cases"
    example = EXAMPLES / "cond-identity-branch"
    # captured on this torch (2.13.0), where the fix fails even eagerly: its eager gate is waived on purpose
    request = CaptureRequest(
        example / "repro.py", fixed=example / "fixed.py", case_id="cond", fullgraph=False, waive=["eager"]
    )
    capture(request, make_runner(TargetSpec(runner="python")), Archive(archive), lambda message: None)
    common = [
        "--good",
        "2.5.1",
        "--bad",
        "2.13.0",
        "--archive",
        archive,
        "--cache",
        tmp_path / "cache.json",
        "--python-for",
        f"2.5.1={old_python}",
        "--python-for",
        f"2.13.0={sys.executable}",
    ]

    code, output, error = invoke("bisect", "cond", *common, "--json", tmp_path / "first.json")
    assert code == 0, (output, error)
    first = json.loads((tmp_path / "first.json").read_text())
    assert (first["last_good"], first["first_bad"], first["exact"]) == ("2.5.1", "2.13.0", True)
    # captured on this torch, so 2.13.0 replays 'unchanged'; on 2.5.1 the post-fix behaves differently
    assert first["bad_outcome"] == "unchanged" and first["good_outcome"] != "unchanged"
    assert [step["ran"] for step in first["steps"]] == [True, True]
    # the replay verdict comes back to what was captured: a fix, compared against the good end throughout
    assert (first["result"], first["baseline"]) == ("regression", "2.5.1")
    assert any(change.startswith("post-fix: ") for change in first["changes"]), first["changes"]
    # the document is shared: its command names the interpreter and the archive as labels do, no folder here
    shared = f"casekit replay --case cond --python {portable_paths(sys.executable)} --archive {portable_paths(str(archive))} --no-record"
    assert first["reproduce"] == shared
    assert (
        f"reproduce with: casekit replay --case cond --python {sys.executable} --archive {archive}" in output
    )  # here: runnable

    # Resumed with a version in between that has no interpreter: nothing is run again,
    # and the version left untested is reported as the ambiguous part of the range.
    code, output, error = invoke(
        "bisect", "cond", *common, "--versions", "2.5.1,2.9.0,2.13.0", "--json", tmp_path / "again.json"
    )
    assert code == 0, (output, error)
    again = json.loads((tmp_path / "again.json").read_text())
    assert [step["ran"] for step in again["steps"]] == [False, False, False]
    assert [step["cached"] for step in again["steps"]] == [True, True, False]
    assert (again["last_good"], again["first_bad"], again["ambiguous"]) == ("2.5.1", "2.13.0", ["2.9.0"])
    assert "3 step(s): 0 run, 2 from the cache" in output
    assert "regression somewhere in 2.9.0 … 2.13.0" in output


MODEL = """\
import torch


def step(x):
    y = torch.sin(x)
    z = y * 2
    return z + 1


compiled = torch.compile(step)
print(compiled(torch.ones(3)).sum().item())
"""


@pytest.mark.slow
def test_real_commit_bisection_finds_the_commit_that_added_a_print(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text(MODEL)
    git(repo, "add", "model.py")
    git(repo, "commit", "-q", "-m", "model")
    (repo / "model.py").write_text(MODEL.replace("    z = y * 2\n", '    z = y * 2\n    print("debug", z.shape)\n'))
    git(repo, "commit", "-q", "-am", "debug print in step")
    (repo / "README.md").write_text("# notes\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "docs")
    culprit = git(repo, "rev-parse", "HEAD~1")
    assert (repo / "model.py").read_text().splitlines()[6].strip().startswith("print(")
    make_dirty(repo)
    before = snapshot(repo)

    args = [
        "bisect-commits",
        "--repo",
        repo,
        "--good",
        "HEAD~2",
        "--bad",
        "main",
        "--site",
        "model.py:7",
        "--cache",
        tmp_path / "cache.json",
        "--json",
        tmp_path / "report.json",
        "--",
        sys.executable,
        "model.py",
    ]
    code, output, error = invoke(*args)
    assert code == 0, (output, error)
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["first_bad"], report["exact"], report["good_outcome"], report["bad_outcome"]) == (
        culprit,
        True,
        "no-break",
        "break",
    )
    assert f"regression in {culprit[:7]} debug print in step" in output
    assert any(change.startswith("script: new: model.py:7 in step") for change in report["changes"])
    assert [(s["site_class"], s["where"]) for s in report["sites"]] == [("new", "model.py:7")]
    assert any("files changed" in change and "model.py" in change for change in report["changes"])
    assert snapshot(repo) == before, "the user's repository must be left exactly as it was"

    code, output, error = invoke(*args)
    assert code == 0, (output, error)
    assert "3 step(s): 0 run, 3 from the cache" in output


@pytest.mark.process
def test_commit_bisection_by_exit_code_skips_125(tmp_path: Path) -> None:
    """--exit-code: any command, git bisect run's contract; the command sees the commit's files."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(6):
        body = '    print("debug")\n' if i >= 3 else ""
        (repo / "app.py").write_text(f"SKIP = {i == 2}\n\n\ndef f():\n{body}    return {i}\n")
        git(repo, "add", "app.py")
        git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    check = tmp_path / "check.py"
    check.write_text(
        "import sys\nsource = open('app.py').read()\nsys.exit(125 if 'SKIP = True' in source else int('print(' in source))\n"
    )
    before = snapshot(repo)

    code, output, error = invoke(
        "bisect-commits",
        "--repo",
        repo,
        "--good",
        shas[0],
        "--bad",
        "main",
        "--exit-code",
        "--no-cache",
        "--json",
        tmp_path / "r.json",
        "--",
        sys.executable,
        check,
    )
    assert code == 0, (output, error)
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["last_good"], report["first_bad"], report["ambiguous"]) == (shas[1], shas[3], [shas[2]])
    assert (report["good_outcome"], report["bad_outcome"], report["runner"]) == ("good", "bad", "exit-code")
    assert "regression somewhere in" in output and "could not be built or run" in output
    assert snapshot(repo) == before

    code, _, error = invoke(
        "bisect-commits",
        "--repo",
        repo,
        "--good",
        shas[0],
        "--exit-code",
        "--site",
        "app.py:5",
        "--no-cache",
        "--",
        sys.executable,
        check,
    )
    assert code != 0 and isinstance(error, BisectError) and "takes no --site" in str(error)
    code, _, error = invoke("bisect-commits", "--repo", repo, "--good", shas[0], "--no-cache", "--", "make", "test")
    assert code != 0 and isinstance(error, BisectError) and "pass --exit-code" in str(error)
