"""Commit bisection over a real generated git history, with a real test command.

Every bisection test also checks that the user's repository is left exactly as
it was: status, index, HEAD, refs, worktree list, and the dirty files themselves.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from casekit.bisect import commits
from casekit.bisect.commits import (
    CommitBisect,
    bisect_commits,
    list_first_parent_commits,
    run_command_outcome,
    temporary_worktree,
)
from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import BAD, GOOD, CommitPredicate, Direction
from casekit.bisect.search import UNKNOWN
from casekit.errors import BisectError, GitError

from .gitrepo import git, make_dirty, snapshot

pytestmark = pytest.mark.process  # every test here starts processes, git or signals

# Imports the repo's app.py; 125 when the commit is marked unbuildable, 1 when f() prints.
# Logs "<$CASEKIT_BISECT_COMMIT> <cwd>" and app.py's text to the file named by argv[1].
CHECK_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, os, sys
    with open(sys.argv[1], "a") as log:
        log.write(json.dumps([os.environ["CASEKIT_BISECT_COMMIT"], os.getcwd(), open("app.py").read()]) + "\\n")
    sys.path.insert(0, ".")
    import app
    if app.UNBUILDABLE:
        sys.exit(125)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        app.f()
    sys.exit(1 if printed.getvalue() else 0)
    """
)


def make_history(repo: Path, count: int, print_from: int, unbuildable: range) -> list[str]:
    """`count` commits of app.py; f() prints from commit `print_from` on. Returns SHAs, oldest first."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(count):
        body = f'    print("debug {i}")\n' if i >= print_from else ""
        (repo / "app.py").write_text(f"UNBUILDABLE = {i in unbuildable}\n\n\ndef f():\n{body}    return {i}\n")
        git(repo, "add", "app.py")
        git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


@pytest.fixture
def check_log(tmp_path: Path) -> Path:
    return tmp_path / "check.log"


@pytest.fixture
def check_command(tmp_path: Path, check_log: Path) -> list[str]:
    script = tmp_path / "check.py"
    script.write_text(CHECK_SCRIPT)
    return [sys.executable, str(script), str(check_log)]


def logged(check_log: Path) -> list[tuple[str, str, str]]:
    """What the check command saw at each commit: (commit, working directory, app.py's text)."""
    lines = check_log.read_text().splitlines() if check_log.exists() else []
    return [tuple(json.loads(line)) for line in lines]  # type: ignore[misc]


def by_exit_code(repo: Path, good: str, bad: str, command: list[str], cache: Path | None = None) -> CommitBisect:
    return CommitBisect(repo, good, bad, command, judge=CommitPredicate(exit_code=True), cache=CacheSettings(cache))


def test_finds_the_commit_that_added_a_print(tmp_path: Path, check_command: list[str], check_log: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 20, print_from=13, unbuildable=range(5, 10))
    make_dirty(repo)
    before = snapshot(repo)

    report = bisect_commits(by_exit_code(repo, shas[0], "main", check_command))

    assert (report.last_good, report.first_bad, report.ambiguous) == (shas[12], shas[13], [])
    assert (report.good_outcome, report.bad_outcome, report.direction) == (GOOD, BAD, Direction.REGRESSION)
    assert report.label(shas[13]).endswith("change 13")
    assert snapshot(repo) == before
    seen = logged(check_log)
    assert [sha for sha, _, _ in seen] == [step.target for step in report.steps if step.ran]
    for sha, cwd, text in seen:
        # each commit is tested in its own worktree holding exactly that commit, not the user's dirty files
        assert text.strip() == git(repo, "show", f"{sha}:app.py") and Path(cwd) != repo
    assert not any(Path(cwd).exists() for _, cwd, _ in seen), "a temporary worktree was left behind"


def test_unbuildable_commits_around_the_culprit_give_an_ambiguous_range(
    tmp_path: Path, check_command: list[str]
) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 20, print_from=12, unbuildable=range(11, 14))
    before = snapshot(repo)

    report = bisect_commits(by_exit_code(repo, shas[0], shas[-1], check_command))

    assert (report.last_good, report.first_bad) == (shas[10], shas[14])
    assert report.ambiguous == shas[11:14] and not report.exact
    assert [step.outcome for step in report.steps if step.target in shas[11:14]] == ["unknown"] * 3
    assert snapshot(repo) == before


def test_a_removed_print_is_a_fix(tmp_path: Path, check_command: list[str]) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 8, print_from=0, unbuildable=range(0))
    (repo / "app.py").write_text("UNBUILDABLE = False\n\n\ndef f():\n    return 8\n")
    git(repo, "commit", "-q", "-am", "drop the print")
    report = bisect_commits(by_exit_code(repo, shas[0], "main", check_command))
    assert (report.good_outcome, report.bad_outcome, report.direction) == (BAD, GOOD, Direction.FIX)
    assert report.first_bad == git(repo, "rev-parse", "HEAD")


def test_candidates_are_first_parent_commits_after_good(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 6, print_from=99, unbuildable=range(0))
    git(repo, "checkout", "-q", "-b", "side", shas[2])
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", "side.txt")
    git(repo, "commit", "-q", "-m", "side work")
    side_sha = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge_sha = git(repo, "rev-parse", "HEAD")

    candidates = list_first_parent_commits(repo, shas[1], "main")

    assert candidates == [*shas[1:], merge_sha]
    assert side_sha not in candidates


def test_interrupt_mid_bisection_leaves_the_repo_untouched(
    tmp_path: Path, check_command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 20, print_from=13, unbuildable=range(0))
    make_dirty(repo)
    before = snapshot(repo)
    seen: list[Path] = []

    def interrupted_third(command, cwd, timeout=None, *, env=None):  # type: ignore[no-untyped-def]
        seen.append(cwd)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return run_command_outcome(command, cwd, timeout, env=env)

    monkeypatch.setattr(commits, "run_command_outcome", interrupted_third)
    with pytest.raises(KeyboardInterrupt):
        bisect_commits(by_exit_code(repo, shas[0], shas[-1], check_command))
    assert snapshot(repo) == before
    assert len(seen) == 3 and not any(path.exists() for path in seen)


def test_an_error_at_a_commit_leaves_the_repo_untouched(
    tmp_path: Path, check_command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 5, print_from=3, unbuildable=range(0))
    before = snapshot(repo)

    def messy(command, cwd, timeout=None, *, env=None):  # type: ignore[no-untyped-def]
        (cwd / "build-output.bin").write_bytes(b"\0" * 100)  # untracked debris must not block removal
        (cwd / "app.py").write_text("edited\n")
        raise RuntimeError("boom")

    monkeypatch.setattr(commits, "run_command_outcome", messy)
    with pytest.raises(RuntimeError, match="boom"):
        bisect_commits(by_exit_code(repo, shas[0], shas[-1], check_command))
    assert snapshot(repo) == before


def test_the_users_hooks_do_not_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 3, print_from=1, unbuildable=range(0))
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)

    with temporary_worktree(repo, shas[1]) as worktree:
        assert (worktree / "app.py").exists()
    assert not marker.exists()
    assert not worktree.exists()


def test_cached_commit_bisection_skips_checkouts_on_rerun(
    tmp_path: Path, check_command: list[str], check_log: Path
) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 12, print_from=7, unbuildable=range(0))
    config = by_exit_code(repo, shas[0], shas[-1], check_command, cache=tmp_path / "cache.json")
    first = bisect_commits(config)
    runs = len(logged(check_log))
    second = bisect_commits(config)
    assert len(logged(check_log)) == runs, "a cached commit was checked out and run again"
    assert (first.first_bad, second.first_bad) == (shas[7], shas[7])
    assert second.evaluated == 0 and second.from_cache == len(second.steps) == runs
    # another command is another cache subject
    bisect_commits(by_exit_code(repo, shas[0], shas[-1], [*check_command, "--other"], cache=tmp_path / "cache.json"))
    assert len(logged(check_log)) == 2 * runs


def test_command_sees_the_commit_it_tests(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 2, print_from=9, unbuildable=range(0))
    script = f"import os, sys; sys.exit(0 if os.environ['CASEKIT_BISECT_COMMIT'] == {shas[1]!r} else 1)"
    with temporary_worktree(repo, shas[1]) as worktree:
        env = {**os.environ, "CASEKIT_BISECT_COMMIT": shas[1]}
        assert run_command_outcome([sys.executable, "-c", script], worktree, env=env) == GOOD


def test_ends_that_agree_say_nothing_changed(tmp_path: Path, check_command: list[str]) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 4, print_from=9, unbuildable=range(0))
    before = snapshot(repo)
    report = bisect_commits(by_exit_code(repo, shas[0], shas[-1], check_command))
    assert (report.first_bad, report.last_good, report.direction) == (None, None, Direction.NOTHING)
    assert [step.target for step in report.steps] == [shas[0], shas[-1]]
    assert snapshot(repo) == before


# --- bad inputs -----------------------------------------------------------------


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="is not a git repository"):
        list_first_parent_commits(tmp_path, "HEAD~1", "HEAD")


def test_unknown_ref(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_history(repo, 3, print_from=9, unbuildable=range(0))
    with pytest.raises(GitError, match="'v9.9' is not a commit"):
        list_first_parent_commits(repo, "v9.9", "main")


def test_good_must_be_an_ancestor_of_bad(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_history(repo, 3, print_from=9, unbuildable=range(0))
    with pytest.raises(BisectError, match="not an ancestor"):
        list_first_parent_commits(repo, shas[2], shas[0])
    with pytest.raises(BisectError, match="same commit"):
        list_first_parent_commits(repo, "main", shas[2])


# --- the command contract (git bisect run) -------------------------------------------


@pytest.mark.parametrize(("code", "outcome"), [(0, GOOD), (1, BAD), (2, BAD), (124, BAD), (125, UNKNOWN), (127, BAD)])
def test_exit_codes_follow_git_bisect_run(tmp_path: Path, code: int, outcome: object) -> None:
    assert run_command_outcome([sys.executable, "-c", f"raise SystemExit({code})"], tmp_path, timeout=60) == outcome


@pytest.mark.parametrize("code", [128, 200, 255])
def test_exit_128_and_above_aborts(tmp_path: Path, code: int) -> None:
    with pytest.raises(BisectError, match=f"exited with {code}.*abort"):
        run_command_outcome([sys.executable, "-c", f"raise SystemExit({code})"], tmp_path, timeout=60)


def test_a_signal_aborts(tmp_path: Path) -> None:
    with pytest.raises(BisectError, match="killed by signal 15"):
        run_command_outcome([sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"], tmp_path, timeout=60)


def test_a_timeout_aborts_and_kills_what_the_command_started(tmp_path: Path) -> None:
    late = tmp_path / "late"
    command = ["sh", "-c", f"(sleep 1 && touch {late}) & sleep 30"]
    started = time.monotonic()
    with pytest.raises(BisectError, match=r"did not finish within 0.3s"):
        run_command_outcome(command, tmp_path, timeout=0.3)
    assert time.monotonic() - started < 5
    time.sleep(1.5)
    assert not late.exists(), "a grandchild survived the timeout"


def test_a_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BisectError, match="cannot run 'no-such-casekit-command'"):
        run_command_outcome(["no-such-casekit-command"], tmp_path)
    with pytest.raises(BisectError, match="no command"):
        run_command_outcome([], tmp_path)
