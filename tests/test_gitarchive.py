"""A git-backed archive: commits of exactly the bundles, messages that say what changed, `casekit log`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import git
import pytest
import typer
from typer.testing import CliRunner

from casekit.archive.git import case_log, commit_paths, log_text
from casekit.archive.store import Archive
from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.cli.records import register
from casekit.errors import CasekitError, GitError
from casekit.model import (
    Case,
    ReplayRecord,
    ScriptObservation,
    ScriptSource,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    SiteVerdict,
)
from casekit.replay.plan import replay_message
from casekit.replay.run import ReplayReport, TargetRun
from casekit.report.markdown import md
from casekit.runners.interface import TargetSpec
from casekit.runners.python import portable_interpreter

FIXTURE_ARCHIVE = Path(__file__).parent / "fixtures" / "report" / "archive"
SCRIPT = "import torch\n\ndef f(x):\n    return x.item()\n"


def site(line: int, category: str = "GB0124", file: str = "repro.py") -> Site:
    return Site(
        file=file,
        line=line,
        function="f",
        source="return x.item()",
        category=category,
        reason="Tensor.item()",
        gb_id=category,
    )


def make_case(
    case_id: str = "item", sites: list[Site] | None = None, replays: list[ReplayRecord] | None = None
) -> Case:
    return Case(
        id=case_id,
        title="item() in f",
        pre=ScriptSource("repro.py", sha256_text(SCRIPT), SCRIPT),
        created="2026-01-02T03:04:05+00:00",
        observations={"pre": ScriptObservation(ScriptStatus.OK, sites=sites if sites is not None else [site(4)])},
        replays=replays or [],
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> git.Repo:
    """A fresh repository with a known identity and nothing from the user's global config."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repository = git.Repo.init(tmp_path / "team")
    with repository.config_writer() as config:
        config.set_value("user", "name", "Triage Person")
        config.set_value("user", "email", "triage@example.com")
    (tmp_path / "team" / "README").write_text("team repo\n")
    repository.index.add(["README"])
    repository.index.commit("initial")
    return repository


@pytest.mark.process
def test_commit_paths_commits_only_the_bundles(repo: git.Repo) -> None:
    root = Path(repo.working_tree_dir or "")
    archive = Archive(root / "cases")
    bundle = archive.save(make_case())
    (root / "unrelated.txt").write_text("work in progress\n")
    repo.git.add("unrelated.txt")  # the user staged something else: it must stay staged, out of our commit
    (root / "README").write_text("edited, not staged\n")

    line = commit_paths(archive.root, [bundle], "capture item: item() in f")

    head = repo.head.commit
    assert line.startswith(f"committed {head.hexsha[:12]}")
    assert head.message.strip() == "capture item: item() in f"
    assert set(head.stats.files) == {"cases/item.toml"}
    assert "unrelated.txt" in repo.git.diff("--cached", "--name-only")
    assert "README" in repo.git.diff("--name-only")


@pytest.mark.process
def test_unchanged_bundles_make_no_commit(repo: git.Repo) -> None:
    archive = Archive(Path(repo.working_tree_dir or "") / "cases")
    bundle = archive.save(make_case())
    commit_paths(archive.root, [bundle], "first")
    head = repo.head.commit.hexsha
    assert commit_paths(archive.root, [bundle], "again").startswith("nothing to commit")
    assert repo.head.commit.hexsha == head


def test_an_archive_outside_git_is_a_clear_error(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "cases")
    bundle = archive.save(make_case())
    with pytest.raises(GitError, match="not inside a git repository"):
        commit_paths(archive.root, [bundle], "x")
    assert issubclass(GitError, CasekitError)


@pytest.mark.process
def test_first_commit_without_identity_uses_casekit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "empty-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    repository = git.Repo.init(tmp_path / "ci-checkout")  # no commits, no user.name: a fresh CI runner
    archive = Archive(tmp_path / "ci-checkout" / "cases")
    bundle = archive.save(make_case())
    commit_paths(archive.root, [bundle], "capture item")
    assert repository.head.commit.author.name == "casekit"


# ------------------------------------------------------------ messages


def run_with(label: str, torch: str, case: Case, observed_sites: list[Site]) -> TargetRun:
    observation = ScriptObservation(ScriptStatus.OK, sites=observed_sites)
    result = classify_case(case, label, {"pre": observation})
    return TargetRun(
        spec=TargetSpec(runner="venv", torch=torch), label=label, environment={"torch": torch}, results=[result]
    )


def test_replay_message_counts_site_classes_per_torch_version() -> None:
    two_sites = make_case("two", [site(4), site(10, "GB0059")])
    gone_before = make_case(  # 2.12 saw its break gone; 2.13 brings it back
        "back",
        [],
        replays=[
            ReplayRecord(
                "2026-01-01T00:00:00+00:00",
                "t",
                "2.12.0",
                "venv",
                "improved",
                Severity.INFO,
                {"pre": "ok"},
                [SiteVerdict("pre", SiteClass.GONE, "repro.py:4", "GB0124")],
            )
        ],
    )
    new_torch = run_with("venv:torch-2.13.0", "2.13.0+cpu", two_sites, [site(5), site(11, "GB0059")])  # both moved
    new_torch.results.append(
        classify_case(gone_before, "venv:torch-2.13.0", {"pre": ScriptObservation(ScriptStatus.OK, sites=[site(4)])})
    )
    old_torch = run_with("venv:torch-2.5.1", "2.5.1", make_case("same"), [site(4)])
    message = replay_message(ReplayReport([new_torch, old_torch]))
    subject, _, body = message.partition("\n\n")
    assert subject == "replay 2.13.0: 2 moved, 1 reappeared; 2.5.1: no change (1 case(s))"
    assert "two on venv:torch-2.13.0: changed (warn); pre: 2 moved" in body


def test_replay_message_names_a_failed_environment() -> None:
    run = TargetRun(spec=TargetSpec(runner="venv", torch="2.99"), label="venv:torch-2.99", error="no such release")
    assert replay_message(ReplayReport([run])) == "replay ?: environment failed"


# ------------------------------------------------------------------ log


@pytest.mark.process
def test_case_log_merges_commits_and_replay_records(repo: git.Repo) -> None:
    root = Path(repo.working_tree_dir or "")
    archive = Archive(root / "cases")
    case = make_case()
    commit_paths(archive.root, [archive.save(case)], "capture item: item() in f")
    case.replays.append(
        ReplayRecord(
            "2030-05-06T07:08:09+00:00",
            "venv:torch-2.13.0",
            "2.13.0",
            "venv",
            "changed",
            Severity.WARN,
            {"pre": "ok"},
            [SiteVerdict("pre", SiteClass.MOVED, "repro.py:5", "GB0124")],
        )
    )
    commit_paths(archive.root, [archive.save(case)], "replay 2.13.0: 1 moved")
    entries = case_log(archive.root, "item")
    kinds = [entry.kind for entry in entries]
    assert kinds[0] == "replay" and kinds.count("commit") == 2 and "capture" in kinds
    assert [e.summary for e in entries if e.kind == "commit"] == ["replay 2.13.0: 1 moved", "capture item: item() in f"]
    text = log_text("item", entries)
    assert "2030-05-06 07:08  replay" in text and "1 moved" in text and "(Triage Person)" in text


def test_log_command_outside_git_shows_the_records(tmp_path: Path) -> None:
    """Outside git, `log` is the bundle's own history: the capture, then every replay, newest first,
    each with its date, target and what changed; an unknown case is one line naming the known ones."""

    def replayed(at: str, torch: str, verdict: str, severity: Severity, classes: list[SiteClass]) -> ReplayRecord:
        sites = [SiteVerdict("pre", site_class, "repro.py:5", "GB0124") for site_class in classes]
        return ReplayRecord(at, f"venv:torch-{torch}", torch, "venv", verdict, severity, {"pre": "ok"}, sites)

    archive = Archive(tmp_path / "cases")
    history = [
        replayed("2030-05-06T07:08:09+00:00", "2.13.0", "changed", Severity.WARN, [SiteClass.MOVED]),
        replayed("2030-07-01T10:00:00+00:00", "2.14.1", "improved", Severity.INFO, [SiteClass.GONE]),
    ]
    archive.save(make_case(replays=history))
    app = typer.Typer()
    register(app)
    done = CliRunner().invoke(app, ["log", "item", "--archive", str(archive.root)])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["2030-07-01", "10:00", "replay"],
        ["2030-05-06", "07:08", "replay"],
        ["2026-01-02", "03:04", "capture"],
    ]
    assert "venv:torch-2.14.1" in lines[0] and "improved" in lines[0] and "1 gone" in lines[0]
    assert "venv:torch-2.13.0" in lines[1] and "changed" in lines[1] and "1 moved" in lines[1]
    assert lines[2].endswith("captured: item() in f")
    missing = CliRunner().invoke(app, ["log", "nope", "--archive", str(archive.root)])
    assert missing.exit_code != 0 and isinstance(missing.exception, CasekitError)
    assert str(missing.exception).startswith("no case 'nope' in ") and str(missing.exception).endswith("(cases: item)")


@pytest.mark.process
def test_log_of_a_mistyped_id_names_the_ids_it_may_mean(repo: git.Repo) -> None:
    """As `show` does: a near typo, the start of an id, a part of it; looked for in git history too."""
    root = Path(repo.working_tree_dir or "")
    archive = Archive(root / "cases")
    for case_id in ("item-branch", "tensor-if", "shape-recompiles"):
        commit_paths(archive.root, [archive.save(make_case(case_id))], f"capture {case_id}")
    app = typer.Typer()
    register(app)
    for typed, meant in (("item-brnch", "'item-branch'"), ("shape", "'shape-recompiles'"), ("tensor", "'tensor-if'")):
        done = CliRunner().invoke(app, ["log", typed, "--archive", str(archive.root)])
        said = str(done.exception)
        assert done.exit_code != 0 and isinstance(done.exception, CasekitError), done.output
        assert "none in its git history" in said and said.endswith(f"did you mean {meant}?"), said


@pytest.mark.slow
def test_replay_commit_then_log_reads_it_back(repo: git.Repo) -> None:
    """The real thing: `casekit replay --commit` on the local torch, then `casekit log` shows that commit."""
    from casekit.cli import app as casekit_app

    root = Path(repo.working_tree_dir or "")
    (root / "cases").mkdir()
    shutil.copy(FIXTURE_ARCHIVE / "print-in-forward.toml", root / "cases" / "print-in-forward.toml")
    commit_paths(root / "cases", [root / "cases" / "print-in-forward.toml"], "capture print-in-forward")
    runner = CliRunner()
    done = runner.invoke(
        casekit_app,
        [
            "replay",
            "--archive",
            str(root / "cases"),
            "--python",
            sys.executable,
            "--commit",
            "--json",
            str(root.parent / "replay.json"),
            "--fail-on",
            "never",
        ],
    )
    assert done.exit_code == 0, done.output
    subject = repo.head.commit.summary
    assert str(subject).startswith("replay 2.13.0: ")
    app = typer.Typer()
    register(app)
    shown = runner.invoke(app, ["log", "print-in-forward", "--archive", str(root / "cases")])
    assert shown.exit_code == 0, shown.output
    assert str(subject) in shown.output
    # the history names the interpreter without this machine's folders (a bundle is shared)
    assert f"replay on {'python:' + portable_interpreter(sys.executable)}" in shown.output
    assert "replay on python:<python>/bin/" in shown.output or sys.prefix not in sys.executable
    # one interpreter is one target: the JSON and the history it just recorded name it alike
    document = json.loads((root.parent / "replay.json").read_text())
    label = portable_interpreter(sys.executable)
    assert [t["label"] for t in document["targets"]] == [f"python:{label}"]
    assert document["targets"][0]["display"] == f"python:{sys.executable}"
    report = runner.invoke(
        casekit_app,
        ["report", "--archive", str(root / "cases"), "--results", str(root.parent / "replay.json"), "-f", "md"]
        + ["--out", "-"],
    )
    assert report.exit_code == 0, report.output
    # the bundle's history held python:current and venv:torch-2.5.1; this replay adds one target, not two
    assert "1 case(s) × 3 target(s)" in report.output and md(f"python:{label}") in report.output
